"""The conversation tasks of mid-training, SFT and chat evaluation (upstream nanochat's tasks/ at 5c93a56),
read from the staged chat data (bench/nanochat/chatdata.py).

  common.py       Task (a sliceable list of conversations), StagedTask (one staged split), TaskMixture,
                  the multiple-choice prompt
  mixtures.py     the datasets of mid-training and SFT, in upstream's order
  smoltalk.py     SmolTalk: general conversations
  mmlu.py         MMLU: four-choice questions (auxiliary_train to train on, test to evaluate)
  arc.py          ARC Easy and Challenge: multiple choice with the dataset's own letters
  gsm8k.py        GSM8K: grade-school maths, its `<<expr=result>>` turned into calculator calls
  humaneval.py    HumanEval: programs completed by the model, run in the sandbox
  customjson.py   conversations from a JSONL file (the identity conversations)
  spellingbee.py  SpellingBee and SimpleSpelling: synthetic rows over the English word list
  templates.py    the spelling tasks' user-message templates
"""
