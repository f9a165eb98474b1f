"""A small word-level tokenizer for motion prompts, built in code (nothing to download)."""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<unk>", "<bos>", "<eos>"]
# The motion vocabulary the shipped models understand; other words map to <unk>.
WORDS = """
a an the and or with to of in on at from up down left right forward backward clockwise
counterclockwise anticlockwise pan tilt zoom rotate rotation spin turn sway swing bounce shake
drift slide move moving slowly slow quickly quick fast gently gentle very little bit slightly
camera image scene object shape circle square triangle star in out static still stay
""".split()


def build_tokenizer(max_length: int = 77) -> PreTrainedTokenizerFast:
    vocab = {token: index for index, token in enumerate([*SPECIAL, *dict.fromkeys(WORDS)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), normalizers.Lowercase(), normalizers.Replace(Regex(r"[^\w\s]"), " ")]
    )
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>",
        special_tokens=[("<bos>", vocab["<bos>"]), ("<eos>", vocab["<eos>"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<bos>",
        eos_token="<eos>",
        model_max_length=max_length,
    )
