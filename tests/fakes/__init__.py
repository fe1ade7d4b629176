"""Fakes of outside libraries, for tests that must not need the real thing (a GPU, a driver)."""
