"""compile-ci: a GitHub App that runs torch.compile suites on pull requests."""
