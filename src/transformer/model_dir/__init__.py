"""The model directory: one owner for its layout, its checkpoints and a training run's folder.

``layout.py`` names every file and folder and says what a folder is (its marker);
``checkpoints.py`` writes, reads, prunes, resumes from and averages checkpoints; ``weights.py``
reads a weights file and checks it; ``settings.py`` says which ``config.json`` gives what (the
directory's the search, a checkpoint's the sizes); ``runs.py`` owns a training run's folder: its
lock, ``--overwrite``, its log. Everything here is written through the write gate (``files.py``),
naming the folder written as its owner. Nothing here needs the training code: every command
that reads a model (translate, evaluate, serve, export, compare, ...) reads it through here.

Import the modules themselves (``from transformer.model_dir.checkpoints import
load_checkpoint``): the write gate reads ``layout.py`` to know which folders are the project's,
and the other modules write through the gate, so this ``__init__`` imports none of them.
"""
