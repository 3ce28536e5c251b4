"""A small client of plumb.v1.AgentService.

It runs an agent on a prompt, prints the streamed text and tool calls as they
arrive, asks on stdin for a decision whenever the run waits for an approval,
resumes the run with it, and prints the final answer. run.sh generates the
plumb.v1 stubs and runs it:

    examples/python/run.sh --addr 127.0.0.1:7070 [--token T] "Write hello.txt"
"""

import argparse
import sys

import grpc

from plumb.v1 import agent_pb2 as pb
from plumb.v1 import agent_pb2_grpc


def follow(stream):
    """Prints a stream's events as they arrive and returns the last one."""
    last = None
    for resp in stream:
        ev = last = resp.event
        kind = ev.WhichOneof("payload")
        if kind == "run_started":
            s = ev.run_started
            print(f"[thread {s.thread_id}, run {s.run_id}, resumed {str(s.resumed).lower()}]")
        elif kind == "message_delta":
            # Subagents stream too; this example shows the main agent's text.
            if not ev.parent_tool_call_id:
                print(ev.message_delta.text, end="", flush=True)
        elif kind == "message":
            # The complete message follows its deltas: end the line.
            if not ev.parent_tool_call_id and ev.message.text:
                print()
        elif kind == "tool_call_started":
            print(f"→ {ev.tool_call_started.name} {ev.tool_call_started.args_json}", flush=True)
        elif kind == "tool_result":
            print(f"← {ev.tool_result.name}: {ev.tool_result.content.partition(chr(10))[0]}", flush=True)
    if last is None:
        raise RuntimeError("the stream ended without events")
    return last


def decide(req):
    """Asks the human about one pending call: y approves it, anything else rejects it."""
    print(f"approve {req.tool_name} {req.args_json}? [y/N] ", end="", flush=True)
    answer = sys.stdin.readline().strip().lower()
    d = pb.Decision(tool_call_id=req.tool_call_id, agent_path=req.agent_path, type=pb.DECISION_TYPE_APPROVE)
    if answer not in ("y", "yes"):
        d.type, d.message = pb.DECISION_TYPE_REJECT, "the user declined"
    return d


def main():
    p = argparse.ArgumentParser(description="Run a plumb agent and follow it.")
    p.add_argument("--addr", default="127.0.0.1:7070", help="agentd gRPC address")
    p.add_argument("--token", default="", help="bearer token, for an agentd started with --token-file")
    p.add_argument("prompt")
    args = p.parse_args()

    md = [("authorization", "Bearer " + args.token)] if args.token else None
    with grpc.insecure_channel(args.addr) as channel:
        client = agent_pb2_grpc.AgentServiceStub(channel)
        stream = client.Run(pb.RunRequest(input=[pb.InputMessage(content=args.prompt)]), metadata=md)
        while True:
            # Every stream ends with one of run_finished, interrupted or error.
            ev = follow(stream)
            kind = ev.WhichOneof("payload")
            if kind == "run_finished":
                f = ev.run_finished
                print(f"final answer ({pb.RunStatus.Name(f.status)}): {f.final_text}")
                return 0
            if kind == "error":
                print(f"error: run failed: {ev.error.code}: {ev.error.message}", file=sys.stderr)
                return 1
            if kind != "interrupted":
                print(f"error: the stream ended with {kind}", file=sys.stderr)
                return 1
            # The run waits: answer every pending call at once, then follow
            # the resumed run on a new stream.
            decisions = [decide(r) for r in ev.interrupted.requests]
            stream = client.Resume(
                pb.ResumeRequest(thread_id=ev.thread_id, interrupt_id=ev.interrupted.interrupt_id, decisions=decisions),
                metadata=md,
            )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as e:
        print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
