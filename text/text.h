// Text data for language models: tokenizers (byte-level characters, GPT-2's BPE), the
// corpus with its training/validation split, and the batch loader. docs/text.md.
#pragma once

#include "text/bpe.h"
#include "text/char_tokenizer.h"
#include "text/corpus.h"
#include "text/gpt2_files.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
