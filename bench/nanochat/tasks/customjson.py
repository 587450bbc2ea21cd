"""CustomJSON: conversations from a JSONL file, one JSON array of messages a line (the identity conversations).

Upstream warns and goes on with 0 rows when the file is missing; staged data is required here, so a missing
file is the one-line error naming the download command (a run never silently trains without it)."""

from pathlib import Path

from bench.nanochat import chatdata
from bench.nanochat.tasks.common import Task


class CustomJSON(Task):
    def __init__(self, filepath: str | Path | None = None, **kwargs):
        super().__init__(**kwargs)
        path = Path(filepath) if filepath else chatdata.staged_file(chatdata.IDENTITY_FILE)
        if not path.is_file():
            raise chatdata.DataError(f"{path}: missing staged chat data; {chatdata.FIX_MISSING}")
        self.conversations = chatdata.read_jsonl_conversations(path)

    def num_examples(self) -> int:
        return len(self.conversations)

    def get_example(self, index: int) -> dict:
        return {"messages": self.conversations[index]}
