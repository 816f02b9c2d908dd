"""Sotto's services. Every service process (`python -m services.<name>.server`) imports this package first.

That makes it the one place to set what gRPC's C core reads once, when `grpc` is first imported, before any
service module imports it. `GRPC_EXPERIMENTS` turns off gRPC's EventEngine client and listener (on by default
in grpcio 1.85): with them on, each call wakes gRPC's threads about twice as often (measured here: a unary
call, 27 context switches on the server and 20 on the client, against 14 and 10; a 12-message stream, 150
against 93). On a two-core machine the first sentence's synthesis keeps both cores busy, and every such
wake-up in the gateway, the vad or the llm during it delays the synthesis (docs/performance.md). A value
already in the environment, even an empty one, is kept.
"""

import os

GRPC_EXPERIMENTS = "-event_engine_client,-event_engine_listener"

os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)
