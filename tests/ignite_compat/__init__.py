"""ignite's own saver tests against tracker_saver: the swap plugin, the runner, and docs/migration.md's table."""
