"""The ``traintrace`` command line: parse arguments, call the layers, print."""
