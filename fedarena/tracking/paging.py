"""Every run of an experiment, page by page; free of MLflow imports (it only calls the client it is given),
so the leaderboards can import it without loading MLflow."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

PAGE = 1000  # runs per search_runs call (MLflow's maximum is larger; this keeps responses small)


def all_runs(client: MlflowClient, experiment_id: str) -> list[Run]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=PAGE, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs
