"""tiny-chat: a toy chat model (about 0.4 M parameters) trained for seconds, then exported to ONNX.

It is honestly a toy: a byte-level BPE tokenizer and a 3-layer Llama trained for a few hundred
steps on a few dozen short dialogues written for Lantau (``data/tiny_chat.txt``). It answers
in ChatML, mostly echoes what it learned and often gets things wrong. Its purpose is to let the
quick start exercise streaming chat, continuous batching and the OpenAI routes on a laptop.

The builders here (tokenizer, model) also make the untrained models the tests use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from inference.runner.generation.chat_template import DEFAULT_CHAT_TEMPLATE, render_chatml

DATA = Path(__file__).parent / "data" / "tiny_chat.txt"
PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SEED = 1234
TRAIN_STEPS = 1200
HIDDEN, LAYERS = 96, 3
LEARNING_RATE = 5e-3
TRAIN_SECONDS = 40.0  # a wall-clock cap so a busy machine still finishes the seeding quickly


def dialogues(path: Path = DATA) -> list[list[dict[str, str]]]:
    """Parse ``user:`` / ``assistant:`` blocks into OpenAI-style message lists."""
    chats = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith("#")]
        turns = [line.split(": ", 1) for line in lines]
        if turns:
            chats.append([{"role": role, "content": text} for role, text in turns])
    return chats


def corpus(path: Path = DATA) -> list[str]:
    return [render_chatml(chat, add_generation_prompt=False) for chat in dialogues(path)]


def train_tokenizer(texts: list[str], vocab_size: int = 512, *, all_bytes: bool = True) -> Any:
    """A byte-level BPE (GPT-2 style) with ChatML special tokens, as a transformers fast tokenizer.

    ``all_bytes=False`` leaves out the byte tokens the texts never use, so even an untrained
    model's output decodes to clean text (tests); the demo keeps all 256 to encode any input.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if all_bytes else [],
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD,
        chat_template=DEFAULT_CHAT_TEMPLATE,
        model_input_names=["input_ids", "attention_mask"],
    )


def build_model(
    tokenizer: Any,
    arch: str = "llama",
    *,
    hidden: int = 128,
    layers: int = 4,
    context: int = 256,
    init_std: float = 0.02,
) -> Any:
    """A randomly initialised Llama (grouped-query attention) or GPT-2 sized for the tokenizer.

    A large ``init_std`` makes an untrained model's greedy output vary with its input (tests).
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    eos = [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(PAD)]
    common = {
        "vocab_size": len(tokenizer),
        "eos_token_id": eos,
        "pad_token_id": eos[1],
        "bos_token_id": eos[1],
        "initializer_range": init_std,
    }
    if arch == "gpt2":
        gpt2_config = GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=context, **common)
        return GPT2LMHeadModel(gpt2_config)
    llama_config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        **common,
    )
    return LlamaForCausalLM(llama_config)


def train(
    model: Any, tokenizer: Any, texts: list[str], *, steps: int, seconds: float, batch_size: int = 8
) -> dict[str, float]:
    """Next-token training on random mini-batches of dialogues; stops at ``steps`` or ``seconds``."""
    import torch

    generator = torch.Generator().manual_seed(SEED)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: more threads only add contention on a shared machine
    encoded = [torch.tensor(ids) for ids in tokenizer(texts)["input_ids"]]
    optimiser = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    decay = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda step: max(0.1, 1 - step / steps))
    model.train()
    started, loss, done = time.perf_counter(), float("nan"), 0
    for done in range(1, steps + 1):  # noqa: B007 - done is reported below
        rows = [encoded[i] for i in torch.randperm(len(encoded), generator=generator)[:batch_size]]
        ids = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=tokenizer.pad_token_id)
        mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(r) for r in rows], batch_first=True)
        loss_t = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        optimiser.zero_grad()
        loss_t.backward()
        optimiser.step()
        decay.step()
        loss = loss_t.item()
        if time.perf_counter() - started > seconds:
            break
    model.eval()
    torch.set_num_threads(threads)
    return {"steps": done, "loss": round(loss, 4), "seconds": round(time.perf_counter() - started, 1)}


def save_hf_folder(model: Any, tokenizer: Any, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def build_and_export(
    out_dir: Path, *, steps: int = TRAIN_STEPS, seconds: float = TRAIN_SECONDS
) -> tuple[Path, Path, dict[str, Any]]:
    """Train tiny-chat, save it as a Hugging Face folder under ``out_dir/hf``, export it to ONNX.

    Returns (model.onnx path, tokenizer.json path, the manifest's ``generation`` section); the
    three files plus ``lantau.json`` (deployment ``tiny-chat``) are written into ``out_dir``.
    Takes about 30-60 s on two CPU cores.
    """
    import torch

    from inference.export.causal_lm import export_model_folder

    out_dir = Path(out_dir)
    with torch.random.fork_rng():
        texts = corpus()
        tokenizer = train_tokenizer(texts)
        model = build_model(tokenizer, hidden=HIDDEN, layers=LAYERS)
        stats = train(model, tokenizer, texts, steps=steps, seconds=seconds)
    folder = save_hf_folder(model, tokenizer, out_dir / "hf")
    (folder / "TRAINING.txt").write_text(
        f"tiny-chat toy model: {stats['steps']} steps, final loss {stats['loss']}, "
        f"{stats['seconds']} s, {sum(p.numel() for p in model.parameters())} parameters\n",
        encoding="utf-8",
    )
    return export_model_folder(folder, out_dir, deployment="tiny-chat", model_version="tiny-chat:1")


def save_untrained(
    folder: Path, arch: str = "llama", *, context: int = 128, silence_eos: bool = False
) -> Path:
    """An untrained 2-layer model and a clean-decoding tokenizer, saved in seconds (tests).

    ``silence_eos`` zeroes the end-of-sequence rows of the output layer, so greedy decoding
    never stops early and runs exactly ``max_tokens`` steps.
    """
    import torch

    tokenizer = train_tokenizer(corpus(), 400, all_bytes=False)
    model = build_model(tokenizer, arch, hidden=64, layers=2, context=context, init_std=0.2)
    if silence_eos:
        with torch.no_grad():
            model.get_output_embeddings().weight[model.config.eos_token_id] = 0.0
    return save_hf_folder(model.eval(), tokenizer, folder)
