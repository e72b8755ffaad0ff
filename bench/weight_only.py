"""Reproduce the weight-only figures in docs/quantization.md ("Language models").

    python -m bench.weight_only [--workdir DIR] [--model tiny-chat|llama-wide] [--bits 4 8] [--block-size 32]

``tiny-chat`` is the quick start's toy chat model (trained for up to 40 s, then exported);
``llama-wide`` an untrained 4-layer Llama with 512-wide layers, where MatMuls dominate decoding as in a
real language model. Each configuration goes through ``quantize_and_compare``, the function the
``quantize_weights`` job runs in its sandbox. Perplexity is on tiny-chat's own dialogues (in domain)
for tiny-chat, on the built-in sentences otherwise. Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from inference.conversion.weight_only import quantize_and_compare


def _export(model: str, workdir: Path) -> Path:
    out = workdir / model
    if (out / "model.onnx").is_file():
        return out
    if model == "tiny-chat":
        from inference.demo.tiny_chat import build_and_export

        build_and_export(out)
        return out
    from inference.demo.tiny_chat import build_model, corpus, save_hf_folder, train_tokenizer
    from inference.export.causal_lm import export_model_folder

    tokenizer = train_tokenizer(corpus())
    folder = save_hf_folder(build_model(tokenizer, hidden=512, layers=4), tokenizer, out / "hf")
    export_model_folder(folder, out, deployment=model)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep the models here")
    parser.add_argument("--model", choices=("tiny-chat", "llama-wide"), default="tiny-chat")
    parser.add_argument("--bits", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--symmetric", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--accuracy-level", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or Path(scratch)
        folder = _export(args.model, workdir)
        texts = None
        if args.model == "tiny-chat":
            from inference.demo.tiny_chat import corpus

            texts = workdir / "tiny-chat-dialogues.txt"
            texts.write_text("\n".join(" ".join(chat.split()) for chat in corpus()) + "\n", encoding="utf-8")
        for bits in args.bits:
            options = {
                "bits": bits,
                "block_size": args.block_size,
                "symmetric": args.symmetric,
                "accuracy_level": args.accuracy_level,
            }
            report = quantize_and_compare(
                folder / "model.onnx",
                workdir / f"{args.model}-int{bits}.onnx",
                tokenizer=folder / "tokenizer.json",
                texts=texts,
                options=options,
            )
            agreement, speed = report["agreement"], report["speed"]
            print(
                json.dumps(
                    {
                        "model": args.model,
                        "options": options,
                        "size": report["size"],
                        "tokens_per_s": [speed["parent_tokens_per_s"], speed["child_tokens_per_s"]],
                        "speedup": speed["speedup"],
                        "perplexity": [agreement["parent_perplexity"], agreement["child_perplexity"]],
                        "perplexity_change": agreement["perplexity_change"],
                        "next_token_agreement": agreement["next_token_agreement"],
                        "texts": agreement["count"],
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
