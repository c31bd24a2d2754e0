"""The MLflow integration: records as MLflow 3 LoggedModels; generic tracker_saver code never imports it."""

__all__: list[str] = []
