"""The special token ids, fixed project-wide so that a model, its tokenizer and its masks agree."""

PAD_ID = 0  # padding: masked out of attention and of the loss
UNK_ID = 1  # unknown piece
BOS_ID = 2  # <s>: the decoder's first input ("outputs shifted right")
EOS_ID = 3  # </s>: generation stops here
