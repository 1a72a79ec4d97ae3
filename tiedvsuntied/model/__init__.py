"""The model: GPT-2 with a tied or untied output head, its init table, accounting and loss.

    config.py      ModelConfig and HeadConfig (checked on construction), init stds, check_config
    accounting.py  parameter counts and FLOPs per token, from a config or a model
    gpt.py         the GPT module: blocks, tying, the init table, gradient split, set_trainable
    loss.py        chunked cross-entropy (the loss without all the logits)
    hf.py          Hugging Face GPT-2 weights in and out

config and accounting import no torch: the reading side (results, analysis, figures) imports
them without loading it.
"""
