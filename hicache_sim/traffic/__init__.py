"""Your own traffic: turn request logs into the trace format the simulator reads (``convert``) and
describe a trace before simulating it (``stats``).

Prompts are never stored: a converted trace holds, per request, its arrival time, prompt and answer
lengths and one chain hash per block of prompt tokens, as Mooncake's published traces do.
"""
