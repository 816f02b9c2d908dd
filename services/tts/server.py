"""The tts gRPC service (sotto.v1.TtsService).

Skeleton from the foundation: health, reflection and metrics are real; the RPCs answer UNIMPLEMENTED (the
generated base servicer's behaviour) until the engine lands. No invented output.
"""

from __future__ import annotations

import grpc

from services.common import config, grpc_server, logs
from sotto.v1 import tts_pb2_grpc


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.TtsConfig))
    logs.setup("tts", common.log_level)

    def register(server: grpc.aio.Server) -> None:
        tts_pb2_grpc.add_TtsServiceServicer_to_server(tts_pb2_grpc.TtsServiceServicer(), server)

    async def load() -> dict[str, str]:
        return {"engine": "none"}

    spec = grpc_server.ServiceSpec("tts", ["sotto.v1.TtsService"], cfg.port, cfg.metrics_port, register, load)
    return spec, common


if __name__ == "__main__":
    grpc_server.main(build)
