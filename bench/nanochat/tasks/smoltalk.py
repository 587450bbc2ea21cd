"""SmolTalk (HuggingFaceTB/smol-smoltalk): general conversations, an optional system message first."""

from bench.nanochat.chat_format import ConversationError, merged_messages
from bench.nanochat.tasks.common import StagedTask

REPO = "HuggingFaceTB/smol-smoltalk"


class SmolTalk(StagedTask):
    def __init__(self, split: str, **kwargs):
        super().__init__(REPO, "default", split, **kwargs)

    def get_example(self, index: int) -> dict:
        messages = self.ds[index]["messages"]
        try:
            turns = merged_messages({"messages": messages})  # the role order upstream asserts
        except ConversationError as e:
            raise ConversationError(f"{REPO} row {index} (after the shuffle): {e}") from None
        if len(turns) < 2 or not all(isinstance(m["content"], str) for m in turns):
            raise ConversationError(f"{REPO} row {index} (after the shuffle): expected at least a user and an "
                                    "assistant message, each with str content")
        return {"messages": messages}
