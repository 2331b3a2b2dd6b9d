"""Chat templates shaped like real thinking models', written with the default model's own
turn markers (<|im_start|>, <|im_end|>) so its vocabulary reads them as control tokens. Test
data for chatapp.engine.thinking: given to copies of the default model (tests.gguf_copy)."""

R1_SHAPED = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}{{ '<|im_start|>system\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'user' %}{{ '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}{%- set content = message['content'] %}"
    "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}{%- endif %}"
    "{{ '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)
"""DeepSeek-R1's shape: the generation prompt opens the thought itself, and a reply's thought
(anything up to its </think>) is cut from the history."""

QWEN3_SHAPED = (
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- '<|im_start|>system\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- set ns = namespace(last_query_index=messages|length - 1, found=false) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if message.role == 'user' and not ns.found %}"
    "{%- set ns.last_query_index = index %}{%- set ns.found = true %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set content = message.content %}{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is defined and message.reasoning_content is not none %}"
    "{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in message.content %}"
    "{%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and reasoning_content %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n'"
    " + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
"""Qwen3's shape: the model opens its own thought; a reply's thought is kept only after the
last question (reasoning_content, or split from the content), so earlier ones are dropped."""

GPT_OSS_SHAPED = (
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- '<|start|>system<|message|>' + message.content + '<|end|>' }}"
    "{%- elif message.role == 'user' %}{{- '<|start|>user<|message|>' + message.content + '<|end|>' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- if '<|channel|>analysis<|message|>' in message.content or '<|channel|>final<|message|>' in message.content %}"
    "{{- raise_exception('You have passed a message containing <|channel|> tags in the content field.') }}"
    "{%- endif %}"
    "{%- if loop.last and not add_generation_prompt %}"
    "{%- if message.thinking %}"
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.thinking + '<|end|>' }}{%- endif %}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|return|>' }}"
    "{%- else %}{{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|end|>' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant' }}{%- endif %}"
)
"""gpt-oss's harmony shape (its template's assistant branch, without tools): the thought is the
`analysis` channel, read from the message's `thinking` field and rendered only for a last reply
that is not being answered (training), so every earlier thought is dropped; channel tags in a
reply's content are refused, as the real template refuses them."""
