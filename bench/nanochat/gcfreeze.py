"""Python's garbage collector out of the measured steps, as upstream base_train does.

After the first step every object alive (the model, the compiled graphs, the optimizers) is moved
into the permanent generation and automatic collection is switched off: a generation-2 collection
over those millions of objects otherwise lands inside some training step at random and stalls it
by a few hundred milliseconds. Garbage of the loop itself is collected every COLLECT_EVERY steps,
and at a step boundary that is logged apart from the timed region.
"""

import gc

COLLECT_EVERY = 5000  # upstream's interval


def after_step(step: int, first: bool) -> None:
    """Call once a step has been timed: freezes after the first, collects every COLLECT_EVERY."""
    if first:
        gc.collect()
        gc.freeze()
        gc.disable()
    elif step % COLLECT_EVERY == 0:
        gc.collect()


def release() -> None:
    """Automatic collection back on once training ends (the process may go on: tests, evaluation)."""
    gc.unfreeze()
    gc.enable()
