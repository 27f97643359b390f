"""Run by the vLLM venv's Python with SGLang's package on its path (infra/vllm/setup.sh): reads
a JSON list of SGLang command lines on stdin, parses each with SGLang's own server-argument
parser, and prints a JSON list: the speculative fields it read, or the parser's error line.
SGLang's DFLASH refuses a CPU, so its flags are checked here, not by launching a server."""

import contextlib
import io
import json
import sys


def main() -> None:
    import sglang
    from sglang.srt.server_args import prepare_server_args

    fields = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_draft_tokens",
              "speculative_num_steps", "speculative_eagle_topk", "speculative_dspark_block_size")
    out = []
    for argv in json.load(sys.stdin):
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = prepare_server_args(argv)
        except SystemExit:  # argparse: usage, then "sglang serve: error: ...", on stderr
            out.append({"error": errors.getvalue().strip().splitlines()[-1]})
            continue
        out.append({"parser": f"sglang {sglang.__version__}",
                    "read": {k: getattr(args, k) for k in fields}})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
