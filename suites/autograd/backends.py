"""The backends the autograd suite's parametrised tests run under, shared by its test modules."""

# aot_eager runs AOT autograd's traced graphs eagerly (isolating AOT autograd itself); inductor compiles them.
BACKENDS = ["aot_eager", "inductor"]
