"""The end-to-end training study (issue 50), being built: Hugging Face
``Trainer``, Keras ``fit`` and a Flax/optax loop trained the way each
framework's users do, their input pipelines, and the time to a target
accuracy. So far its data (``data``: the generated sentence task and its
tokenization); the study is not registered until its cells run."""
