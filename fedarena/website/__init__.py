"""The robustness leaderboard as a static site (``fedarena site``): the store's robustness cards and the
submissions, each rerun through the battery in processes of its own, as pages and ``leaderboard.json``."""
