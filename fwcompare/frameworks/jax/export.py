"""JAX's deployment paths (``Framework.deploy_paths``): its exporter (jax.export,
jax2tf to TFLite) and the runtime of its own artifact kind (jax.export).
jax is imported where used."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import head_output
from ..export import Exporter, Runtime


class JaxExporter(Exporter):
    def forward(self):
        """The model's output for token ids, its parameters an argument."""
        model, head = self.model, self.job.head

        def forward(params, ids):
            return head_output(model(ids, params=params, train=False), head)
        return forward

    def apply(self):
        """The forward with the model's own parameters (jax2tf converts it)."""
        forward, params = self.forward(), self.model.params
        return lambda ids: forward(params, ids)

    def export_jax_export(self, out):
        import flax.serialization
        import jax
        import jax.numpy as jnp
        from jax import export

        model, forward = self.model, self.forward()
        b, s = export.symbolic_shape("b, s")
        shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                                        model.params)
        exp = export.export(jax.jit(forward))(shapes, jax.ShapeDtypeStruct((b, s), jnp.int32))
        (out / "model.jaxexport").write_bytes(exp.serialize())
        (out / "params.msgpack").write_bytes(flax.serialization.msgpack_serialize(
            jax.tree_util.tree_map(np.asarray, model.params)))
        return (f"jax.export (symbolic b, s; platforms {', '.join(exp.platforms)}), "
                "parameters as an argument, saved with flax.serialization (msgpack)")

    def export_jax2tf_tflite(self, out):
        import tensorflow as tf
        from jax.experimental import jax2tf

        fn = jax2tf.convert(self.apply(), with_gradient=False)
        extra = self.sentence_shape()
        for b, s in dict.fromkeys([*self.shapes(), *([extra] if extra else [])]):
            tff = tf.function(fn, input_signature=[tf.TensorSpec([b, s], tf.int32)],
                              autograph=False)
            converter = tf.lite.TFLiteConverter.from_concrete_functions(
                [tff.get_concrete_function()], tff)
            (out / f"model-{b}x{s}.tflite").write_bytes(converter.convert())
        return ("jax2tf.convert (native serialization), TFLiteConverter, static shapes "
                "(the grid's and the sentence pairs'), weights as constants")


class JaxExport(Runtime):
    def __init__(self, path: Path, threads: int, device: str):
        import jax
        from jax import export

        import flax.serialization

        self.jax = jax
        exp = export.deserialize(bytearray((path / "model.jaxexport").read_bytes()))
        self.params = jax.device_put(flax.serialization.msgpack_restore(
            (path / "params.msgpack").read_bytes()))
        self.fn = jax.jit(exp.call)
        self.setup = (f"jax.export.deserialize, flax.serialization.msgpack_restore, "
                      f"jax.jit(exported.call), JAX {jax.__version__}")

    def inputs(self, ids):
        return self.jax.device_put(np.asarray(ids, dtype=np.int32))

    def run(self, x):
        return self.fn(self.params, x)
