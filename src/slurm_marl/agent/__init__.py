"""The learned agents, above ``policy`` and ``models``: the learned place plugin (registered
out of tree as ``learned``), its observer (what an agent sees of its partition), views,
chooser and the checkpoint that bundles a trained policy with its interference model.
``models`` keeps the torch networks only."""
