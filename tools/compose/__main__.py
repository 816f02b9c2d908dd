"""The command line: `python -m tools.compose up|down|ps|logs|scale llm=N|swarm ...|build|base|wheels|doctor|...`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from python_on_whales import DockerException

import tools.compose
from tools.compose import swarm
from tools.compose.common import ComposeError, say
from tools.compose.engine import availability, client, start_engine, stop_engine
from tools.compose.images import DEFAULT_BASE_IMAGE, build, build_base, build_wheelhouse, engine_platform
from tools.compose.stack import UP_TIMEOUT_S, down, logs, ps, scale, up


def parse_scale(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    if not name or not sep or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected SERVICE=N (e.g. llm=2), got {text!r}")
    return name, int(count)


def run_swarm(args: argparse.Namespace) -> None:
    if args.swarm_command == "up":
        swarm.up(args.timeout, build_images=not args.no_build, host_models=args.host_models, gpu=args.gpu,
                 advertise_addr=args.advertise_addr, publish_mode=args.publish_mode)
    elif args.swarm_command == "scale":
        swarm.scale(*args.target, timeout_s=args.timeout)
    elif args.swarm_command == "ps":
        rows = swarm.ps()
        keys = ("service", "slot", "state", "node", "task", "error")
        widths = {k: max([len(k)] + [len(r[k]) for r in rows]) for k in keys}
        for r in [{k: k.upper() for k in keys}, *rows]:
            print("  ".join(r[k].ljust(widths[k]) for k in keys).rstrip())
    elif args.swarm_command == "down":
        swarm.down(leave=args.leave, volumes=args.volumes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compose", description=tools.compose.__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="build offline, start, wait until all are healthy")
    p.add_argument("--timeout", type=float, default=UP_TIMEOUT_S, help="seconds to wait for health (600)")
    p.add_argument("--no-build", action="store_true", help="use the images as they are")
    p.add_argument("--profile", action="append", default=[], help="also start a profile (observability)")
    p.add_argument("--gpu", action="store_true",
                   help="run the llm on an NVIDIA GPU (compose.gpu.yaml; needs the NVIDIA container toolkit)")
    p.add_argument("--host-models", action="store_true",
                   help="mount this host's SOTTO_MODEL_DIR at /models instead of the models volume")
    p = sub.add_parser("down", help="stop and remove the containers and network")
    p.add_argument("--volumes", action="store_true", help="also remove the volumes (the model cache!)")
    sub.add_parser("ps", help="list the containers with their health")
    p = sub.add_parser("logs", help="print the services' logs")
    p.add_argument("services", nargs="*")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", default=None, help="lines per container (default all)")
    p = sub.add_parser("scale", help="run N replicas of a service, e.g. scale llm=2")
    p.add_argument("target", type=parse_scale, metavar="SERVICE=N")
    p.add_argument("--timeout", type=float, default=UP_TIMEOUT_S)
    p = sub.add_parser("build", help="base image (if missing), wheelhouse and service images")
    p.add_argument("services", nargs="*")
    p = sub.add_parser("base", help="(re)build the base image from Debian's packages")
    p.add_argument("--tag", default=DEFAULT_BASE_IMAGE)
    sub.add_parser("wheels", help="(re)build build/wheelhouse for the engine's platform")
    p = sub.add_parser("swarm", help="the same stack on Docker Swarm: up|scale|ps|down (docs/scaling.md)")
    swarm_cmd = p.add_subparsers(dest="swarm_command", required=True)
    q = swarm_cmd.add_parser("up", help="build offline, make a swarm if needed, deploy, wait until running")
    q.add_argument("--timeout", type=float, default=swarm.UP_TIMEOUT_S)
    q.add_argument("--no-build", action="store_true", help="use the images as they are")
    q.add_argument("--gpu", action="store_true", help=f"llm on nodes labelled {swarm.GPU_LABEL}=true, one GPU each")
    q.add_argument("--host-models", action="store_true", help="bind this host's SOTTO_MODEL_DIR at /models")
    q.add_argument("--advertise-addr", default="127.0.0.1",
                   help="address other nodes reach this manager at (swarm init; 127.0.0.1: one node only)")
    q.add_argument("--publish-mode", choices=swarm.PUBLISH_MODES, default="host",
                   help="gateway port on the nodes running it (host), or the routing mesh (ingress: needs IPVS)")
    q = swarm_cmd.add_parser("scale", help="run N tasks of a service, e.g. scale llm=3")
    q.add_argument("target", type=parse_scale, metavar="SERVICE=N")
    q.add_argument("--timeout", type=float, default=swarm.UP_TIMEOUT_S)
    swarm_cmd.add_parser("ps", help="the stack's tasks and their state")
    q = swarm_cmd.add_parser("down", help="remove the stack")
    q.add_argument("--volumes", action="store_true", help="also remove the stack's volumes (the model cache!)")
    q.add_argument("--leave", action="store_true", help="also leave the swarm (docker swarm leave --force)")
    sub.add_parser("doctor", help="say whether a Docker engine and compose v2 are usable here")
    sub.add_parser("engine", help="Linux, root: install Debian's docker.io if needed and start dockerd")
    sub.add_parser("engine-stop", help="stop the dockerd that `engine` started")
    args = parser.parse_args(argv)

    try:
        if args.command == "doctor":
            avail = availability()
            print(json.dumps({"ok": avail.ok, "engine": avail.engine, "compose": avail.compose,
                              "problem": avail.problem,
                              "compose_plugin_from": str(avail.config_dir) if avail.config_dir else "docker CLI"},
                             indent=1))
            return 0 if avail.ok else 1
        if args.command == "engine":
            say(start_engine())
            return 0
        if args.command == "engine-stop":
            say(stop_engine())
            return 0
        if args.command == "up":
            up(args.timeout, build_images=not args.no_build, profiles=args.profile, host_models=args.host_models,
               gpu=args.gpu)
        elif args.command == "down":
            down(args.volumes)
        elif args.command == "ps":
            rows = ps()
            widths = {k: max([len(k)] + [len(r[k]) for r in rows]) for k in ("name", "service", "state", "health")}
            print("  ".join(k.upper().ljust(w) for k, w in widths.items()) + "  PORTS")
            for r in rows:
                print("  ".join(r[k].ljust(w) for k, w in widths.items()) + "  " + r["ports"])
        elif args.command == "logs":
            logs(args.services, args.follow, args.tail)
        elif args.command == "scale":
            scale(*args.target, timeout_s=args.timeout)
        elif args.command == "swarm":
            run_swarm(args)
        elif args.command == "build":
            build(client(), args.services)
        elif args.command == "base":
            build_base(client(), args.tag)
        elif args.command == "wheels":
            build_wheelhouse(engine_platform(client()))
    except ComposeError as exc:
        print(f"compose: {exc}", file=sys.stderr)
        return 1
    except DockerException as exc:
        print(f"compose: `{' '.join(exc.docker_command)}` failed (exit {exc.return_code})"
              + (f": {exc.stderr.strip()}" if exc.stderr else ""), file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"compose: `{' '.join(map(str, exc.cmd))}` failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
