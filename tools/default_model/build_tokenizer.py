"""Byte-level BPE tokenizer in the Qwen format (NFC, the Qwen split regex, byte
level, ChatML special tokens), trained on the corpus with `tokenizers`.

The chat template is plain ChatML; it is written into tokenizer_config.json.
"""
import json, os

from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, trainers

from model_def import SPECIALS, VOCAB

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Message content may be a string or a list of OpenAI content parts (text parts
# are joined; other parts are dropped: the model reads text only).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message.content is string -%}{%- set content = message.content -%}"
    "{%- elif message.content is none -%}{%- set content = '' -%}"
    "{%- else -%}{%- set ns = namespace(text='') -%}"
    "{%- for part in message.content -%}{%- if part.type == 'text' -%}{%- set ns.text = ns.text + part.text -%}"
    "{%- endif -%}{%- endfor -%}{%- set content = ns.text -%}{%- endif -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")


def render_chat(messages):
    """What CHAT_TEMPLATE renders for string contents (used to build training text)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def train(texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(SPECIALS), special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer, length=len(texts))
    tok.add_special_tokens(SPECIALS)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    assert ids == {s: VOCAB - len(SPECIALS) + i for i, s in enumerate(SPECIALS)}, ids
    return tok


def save(tok, out_dir):
    """tokenizer.json + tokenizer_config.json (with the chat template) as transformers writes them."""
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.model_max_length = 8192
    fast.save_pretrained(out_dir)
    cfg_path = os.path.join(out_dir, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg["add_bos_token"] = False
    json.dump(cfg, open(cfg_path, "w"), indent=2, ensure_ascii=False)
    jinja = os.path.join(out_dir, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)  # one source of truth: tokenizer_config.json
    return fast
