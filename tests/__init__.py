"""The harness's own tests (a package, so that no test module shadows a suite module of the same name)."""
