"""The artifact and log browser behind the check run's Details link: one blueprint per feature."""
