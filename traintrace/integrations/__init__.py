"""The framework integrations: ``traintrace.integrations.torch`` (``TorchLineage``),
``.hf`` (``TraintraceCallback`` for the Hugging Face ``Trainer``), ``.lightning`` (a Lightning
``Callback``) and ``.ray`` (Ray Tune population-based training). Importing this package imports
no framework; each module needs its extra (``pip install 'traintrace[torch]'`` ...)."""
