"""The conversation tasks of mid-training, SFT and chat evaluation (upstream nanochat's tasks/ at 5c93a56),
read from the staged chat data (bench/nanochat/chatdata.py)."""
