"""What the operators' commands do on the live pipeline (no printing): ``publish`` (a JSON Lines
log onto ``lineage.events``), ``plans`` (the plans and halts in force), ``release`` (lift a
halt), ``alerts`` (``traintrace watch``). Errors: :mod:`streams.operator_commands.errors`."""
