"""One module per CLI subcommand group."""
