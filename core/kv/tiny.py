"""A tiny random-weight Llama and a byte-level BPE tokenizer, built locally in seconds.

For tests, benchmarks and trying the KV tier with nothing downloaded: the answers are noise,
but prefill, decoding and KV reuse are the real code paths of a Llama model.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["build_tiny_llama"]

_CORPUS = """
You are a helpful support assistant for ACME. Answer briefly and politely, cite the policy.
Refunds are paid to the original card within 14 days. Orders ship from Lyon and Austin.
Passwords are reset from Settings, Security, Forgot password. Accounts lock after five tries.
The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.
Questions: how, what, when, where, why, who, which, can, do, does, is, are, will, should.
"""

_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tiny_llama(
    path: str | Path,
    *,
    hidden_size: int = 128,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    vocab_size: int = 512,
    seed: int = 0,
) -> Path:
    """Write a random Llama (``config.json``, weights) and its tokenizer to ``path``, silently
    (no progress bars, nothing on stdout)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    path = Path(path)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # it prints blank lines to stdout when stdout is not a terminal
    )
    bpe.train_from_iterator(_CORPUS.split("\n") * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" for one shard
    try:
        model.save_pretrained(path)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(path)
    return path
