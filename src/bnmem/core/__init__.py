"""Settings, files, seeds, CPU pinning and the stage runner: what every stage needs. Never imports torch."""
