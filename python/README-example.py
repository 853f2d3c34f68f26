import weft

def square(i):
    return i * i

def fill(buf):
    buf[0] = 42                                   # the body gets the buffer itself, no copy

with weft.Runtime(workers=2):                     # leaving the block waits for every task
    T = weft.TaskSpace("T")                       # T[i] names a task, spawned yet or not
    for i in reversed(range(1, 101)):             # any order: T[i] follows T[i-1], spawned later
        weft.spawn(square, i, task=T[i], deps=[T[i - 1]] if i > 1 else [])
    total = weft.spawn(lambda: sum(T[i].result() for i in range(1, 101)), deps=[T[100]])
    print("sum of squares =", total.result())     # 338350

    buf = bytearray(1)                            # any buffer: bytearray, NumPy array, ...
    weft.spawn(fill, buf, writes=[buf])
    print("read", weft.spawn(lambda b: b[0], buf, reads=[buf]).result())  # 42: readers follow writers

    bad = weft.spawn(int, "x", name="parse")      # raises ValueError on a worker
    after = weft.spawn(print, "never runs", deps=[bad])
    print(repr(bad.exception()))                  # kept with its traceback; .result() re-raises it
    print(after.exception())                      # CancelledError naming the failed task 'parse'
