"""The generation study's modes per framework, and the mode each compiled
mode is compared with."""
GEN_MODES = {"torch": ("eager", "static-compile"), "tensorflow": ("eager", "xla"),
             "jax": ("jit",)}
# The mode each compiled mode is compared with (its compile's breakeven).
UNCOMPILED = {("torch", "static-compile"): "eager", ("tensorflow", "xla"): "eager"}
