"""Sotto's services. Every service process (`python -m services.<name>.server`) imports this package first.

That makes it the one place to set what gRPC's C core reads once, when `grpc` is first imported, before any
service module imports it. `GRPC_EXPERIMENTS` turns off gRPC's EventEngine client and listener (on by default
in grpcio 1.85), which wake gRPC's threads about twice as often per call. On a two-core machine the first
sentence's synthesis keeps both cores busy, and each such wake-up in another process delays it; the
measurements are in docs/performance.md. A value already in the environment, even an empty one, is kept.
"""

import os

GRPC_EXPERIMENTS = "-event_engine_client,-event_engine_listener"

os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
