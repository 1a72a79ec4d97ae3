"""The model: GPT-2 with a tied or untied output head, its init table, accounting and loss; the
module table is in docs/model.md. config and accounting import no torch (the reading side)."""
