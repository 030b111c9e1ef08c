"""The `mq` command line (entry point `mq.cli.main:main`); see docs/reference/cli.md."""
