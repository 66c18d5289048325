"""kernelrl's domain layer: problems, registry, config, environments, rewards, training.
Nothing here imports Textual or typer."""
