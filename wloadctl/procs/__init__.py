"""The processes of a run: scheduler, executors, and the supervisor that spawns and reaps them."""
