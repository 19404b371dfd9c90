"""Stand-in for `transformers`: the Trainer's input-moving method
(trainer.py)."""
