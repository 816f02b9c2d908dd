"""The vad gRPC service (sotto.v1.VadService).

Skeleton from the foundation: health, reflection and metrics are real; the RPCs answer UNIMPLEMENTED (the
generated base servicer's behaviour) until the engine lands. No invented output.
"""

from __future__ import annotations

import grpc

from services.common import config, grpc_server, logs
from sotto.v1 import vad_pb2_grpc


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.VadConfig))
    logs.setup("vad", common.log_level)

    def register(server: grpc.aio.Server) -> None:
        vad_pb2_grpc.add_VadServiceServicer_to_server(vad_pb2_grpc.VadServiceServicer(), server)

    async def load() -> dict[str, str]:
        return {"engine": "none"}

    spec = grpc_server.ServiceSpec("vad", ["sotto.v1.VadService"], cfg.port, cfg.metrics_port, register, load)
    return spec, common


if __name__ == "__main__":
    grpc_server.main(build)
