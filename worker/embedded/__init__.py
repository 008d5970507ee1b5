"""The development servers (Valkey, PostgreSQL, a local cluster), imported only at the edge: the CLI
and ``make run`` decide to start them."""
