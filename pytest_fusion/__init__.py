"""pytest-fusion: compile the code under test with our own compiler and assert
what it fused, launched, moved and how fast it ran."""
pytest_plugins = ["pytest_fusion.plugin", "pytest_fusion.report.hooks", "pytest_fusion.baselines"]
