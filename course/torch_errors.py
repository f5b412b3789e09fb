"""The PyTorch and Python errors students hit, said in the course's terms: what the message means for the
tensors of an attention layer, and what to check. ``explain`` reads only the error's text."""
import re

# The verdict on an exercise still raising the released ``NotImplementedError()``.
NOT_IMPLEMENTED = "还没有实现（not yet implemented）"

# PyTorch's own NotImplementedError for an operation with no kernel for a dtype (the harness tells it from an
# exercise left unwritten by this).
NO_KERNEL = r"\"?(\w+)\"? not implemented for '(\w+)'"

_RULES = (
    (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)",
     lambda m: f"矩阵乘法两边对不上：左边（展平后）是 {m[1]}×{m[2]}，右边是 {m[3]}×{m[4]}，左边的最后一维 {m[2]} "
               f"应该等于右边的第一维 {m[3]}（乘的时候沿这一维求和）。出错的是 A @ B 的话，看看两边是不是切错了维度、"
               "该不该转置；是 nn.Linear 投影的话，送进去的张量的最后一维要等于这一层的输入宽度（比如头是不是还没拼回去，"
               "[B, H, T, D] → [B, T, H·D]）。"),
    (r"tensors used as indices must be long, int, byte or bool tensors",
     lambda m: "用作下标的张量必须是整数（或 bool）：`/` 除出来的是浮点数，整数下标要用 `//`（或 torch.div(..., rounding_mode=\"floor\")）。"),
    (r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: \[(\d+), (\d+)\]",
     lambda m: (f"矩阵乘法 A @ B 里，A 的最后一维是 {m[2]}，B 的倒数第二维却是 {m[4]}：两者要相等（乘的时候沿这一维求和）。"
                "看看两边是不是有一个该转置（.mT），或者切出来的那一段宽度对不对。") if m[1] == m[3] else
               (f"批量矩阵乘法两边的批（最后两维之前所有维合起来）不一样大：左边 {m[1]}，右边 {m[3]}。"
                "看看两边的 batch 和头数是不是一样。")),
    (r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)",
     lambda m: f"两个张量逐元素运算（+、*、masked_fill、torch.where ……）时形状对不上：对齐之后的第 {m[3]} 维一个是 "
               f"{m[1]}，一个是 {m[2]}，又都不是 1，没法广播。打印出错那一行两边张量的 shape，对照约定看看是哪一边的"
               "维度顺序、头数或长度不对（带缓存解码时，key 的长度是缓存里的位置加上新来的）。"),
    (r"The expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at non-singleton dimension (\d+)",
     lambda m: f"expand 的目标形状在第 {m[3]} 维是 {m[1]}，可张量在这一维的大小是 {m[2]}：只有大小为 1 的维才能 expand。"),
    (r"Sizes of tensors must match except in dimension (\d+)\. Expected size (\d+) but got size (\d+) for tensor number (\d+)",
     lambda m: f"torch.cat 沿第 {m[1]} 维拼接，其他各维必须一样大：第 1 个张量在另一维上是 {m[2]}，第 {int(m[4]) + 1} 个却是 "
               f"{m[3]}。看看是哪一个的形状不对（少取了几行，还是多了几行）；拼的是 KV 缓存的话，沿序列维拼"
               "（[B, 头数, T, D] 里的 dim=2，即 dim=-2）。"),
    (r"view size is not compatible with input tensor's size and stride",
     lambda m: "view 要求张量在内存里是连续的，transpose 或 permute 之后就不是了：先 .contiguous() 再 view，"
               "或者直接用 reshape。"),
    (r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)",
     lambda m: f"view/reshape 的目标形状 [{m[1]}] 的元素总数和输入的 {m[2]} 个不相等：检查头数 × head_dim 是否等于"
               "这一维的宽度，以及 B、T、头数的顺序。"),
    (r"unflatten: Provided sizes \[([-\d, ]*)\] don't multiply up to the size of dim (-?\d+) \((\d+)\)",
     lambda m: f"unflatten 要把第 {m[2]} 维（长 {m[3]}）拆成 [{m[1]}]，可这几个数乘起来不等于 {m[3]}：这一维的宽度和你"
               "以为的不一样。打印它的 shape，再看看它是怎么切出来的（每一段的宽度 = 头数 × 每头的维数，几段宽度不一定相等）。"),
    (r"Given groups=(\d+), expected weight to be divisible by \d+ at dimension 0, but got weight of size \[\[?([\d, ]+)\]?\]",
     lambda m: f"分组卷积的 groups={m[1]} 是从输入的通道数来的，可权重 [{m[2]}] 的第 0 维（通道数）不是它的倍数："
               "F.conv1d 的输入要是 [B, 通道, T]，通道在第 1 维。x 是 [B, T, 通道] 的话，先 transpose(1, 2)。"),
    (r"Input type \((\w+)\) and weight type \(([\w.]+)\) should be the same",
     lambda m: f"卷积的输入是 {_dtype_of(m[1])}，权重却是 {_dtype_of(m[2])}：F.conv1d 不会替你转换。先把权重转成输入的 dtype"
               "（weight.to(x.dtype)）再卷积，输出就和 x 同 dtype。"),
    (r"scatter(?:_add)?\(\): Expected self\.dtype to be equal to src\.dtype",
     lambda m: "scatter_ / scatter_add_ 要求被写的张量和写进去的值 dtype 相同：计数时两边都用整数（比如 "
               "torch.zeros(..., dtype=torch.long) 配 torch.ones_like(ids)），或者两边都用浮点。"),
    (r"can't multiply sequence by non-int of type 'float'",
     lambda m: "一个 Python 的 tuple 或 list 乘了一个小数：torch.max(x, dim=...) 返回的是 (values, indices) 两个东西，"
               "要取 .values（或者用 x.amax(dim=..., keepdim=True)）。"),
    (r"bincount only supports 1-d non-negative integral inputs",
     lambda m: "torch.bincount 只接受一维的非负整数张量：[B, n] 的 token id 要一行一行地 bincount（每行各自计数），"
               "或者用 scatter_add_ 在 dim=-1 上按行累加。"),
    (r"a leaf Variable that requires grad is being used in an in-place operation",
     lambda m: "对需要梯度的参数（nn.Parameter）做了原地修改：用不带下划线的运算得到新张量，不要改参数本身。"),
    (r"(too many|not enough) values to unpack \(expected (\d+)(?:, got (\d+))?\)",
     lambda m: f"解包时个数不对：这里要拆成 {m[2]} 个值"
               + (f"，得到的是 {m[3]} 个" if m[3] else "") + "。拆的是一个函数的返回值的话，对照约定看它返回几个值；"
               "拆的是 x.shape（B, T, _ = x.shape）的话，是这个张量的维数不对。"),
    (r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got (-?\d+)\)",
     lambda m: f"dim={m[3]} 超出了范围：这个张量只有 {int(m[2]) + 1} 维（能用的 dim 是 {m[1]} 到 {m[2]}）。"
               "看看它是不是比你以为的少了一维（比如还没拆出头，或者被 squeeze 掉了）。"),
    (r"'tuple' object has no attribute '(\w+)'",
     lambda m: f"这里的值是一个 tuple，不是张量，所以没有 .{m[1]}：返回两个值的函数（attention 返回 (output, weights)，"
               "带 cache 的 forward 返回 (out, cache)）要先解包再用。"),
    (r"object of type 'NoneType' has no len\(\)",
     lambda m: "对 None 取了 len()：不带缓存调用时 cache 是 None，先判断 cache is None（这时前面没有已缓存的位置），"
               "再用 len(cache)。"),
    (r"'NoneType' object (?:has no attribute '(\w+)'|is not subscriptable|is not iterable)",
     lambda m: "这里的值是 None：是不是某个函数忘了 return，或者在没有传 cache（cache=None）时也用到了它？"),
    (r"masked_fill_? only supports boolean masks|expected mask dtype to be Bool",
     lambda m: "masked_fill 的 mask 要是 bool 张量（True/False）：0/1 的整数 mask 先 .bool()，或者用 == 比较得到。"),
    (NO_KERNEL,
     lambda m: f"PyTorch 的 {m[1]} 在 {m[2]} 上没有实现：在 CPU 上，有些运算不支持低精度的 dtype。"
               "先把参与运算的张量转成 float32 算（.float()），算完再转回输入的 dtype。"),
    (r"only one element tensors can be converted to Python scalars",
     lambda m: "把一个不止一个元素的张量交给了只收一个数的函数（math.exp、math.sqrt、float()、int()、.item() ……）："
               "对张量逐元素运算要用 torch 的函数，比如 torch.exp(x) 或 x.exp()。"),
    (r"prob_dist must be 1 or 2 dim",
     lambda m: "torch.multinomial 只收 1 维或 2 维的概率，这里应是 [B, V]：取最后一个位置的 logits 要写 logits[:, -1]"
               "（写成 logits[:, -1:] 会留下长度为 1 的位置维，成了 [B, 1, V]）。"),
    (r"selected index k out of range",
     lambda m: "topk 要取的个数 k 比这一维的长度还大：先和这一维的长度取较小的那个（min(k, x.shape[-1])），"
               "k 不小于长度时就是全都留下。"),
    (r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)",
     lambda m: (f"取下标 {m[1]} 时，第 {m[2]} 维是空的（长度 0）：多半是前面的切片切空了。按块切的话，第 i 块是 "
                "x[..., start:start + C]，终点要写 start + C，不是 C；也看看 range 的终点和步长。") if m[3] == "0" else
               f"下标 {m[1]} 超出了范围：第 {m[2]} 维只有 {m[3]} 个（下标从 0 到 {int(m[3]) - 1}，或从 −{m[3]} 到 −1）。"),
    (r"index out of range in self",
     lambda m: "用下标查表（nn.Embedding、index_select）时有下标超出了表的大小：送进模型的 token id 要在 0 到词表大小 − 1 "
               "之间，形状是 [B, T]。新 token 是 argmax 选出来的话，要沿词表那一维取（argmax(dim=-1)）：不给 dim 时，"
               "argmax 在展平后的整个张量上取下标，得到的数会超过词表大小。"),
    (r"Error\(s\) in loading state_dict for (\w+)",
     lambda m: f"load_state_dict 装不进 {m[1]} 的权重：权重的名字或形状和模块的参数对不上。参数名按练习的约定写，"
               "形状按约定算；权重要写成 self.weight = nn.Parameter(...)：存成普通张量（self.weight = torch.ones(dim)）"
               "的话，它不是参数，不在 state_dict 里，也就装不进去。"),
    (r"AssertionError",
     lambda m: "这是代码里自己写的 assert：它假设的条件在这个用例上不成立。对照用例的参数想一想，这个假设是不是约定保证的"
               "（约定没有保证的，评分就可能用到）；要是你想检查输入，条件要和约定一字不差。"),
    (r"unsupported operand type\(s\) for ([^:]+): '(\w+)' and '(\w+)'",
     lambda m: f"{m[2]} 和 {m[3]} 之间不能做 {m[1].strip()} 运算：看看其中一边是不是 None、tuple 或者一个函数。"),
)


# Tensors of two dtypes met in one operation. What to do depends on the exercise's contract.
_MIXED_DTYPES = (r"expected (?:m1 and m2 to have the same dtype|scalar type \w+ but found \w+|both vectors to have same dtype)"
                 r"|mat1 and mat2 must have the same dtype|Expected .* to have the same dtype")
_IN_INPUT_DTYPE = ("参与运算的张量 dtype 不一样（比如一个 float32，一个 bfloat16 或 float64）：中间新建的张量"
                   "（torch.ones、torch.arange、cos/sin 表、mask 的填充值）要用输入的 dtype，写 dtype=x.dtype 或 .to(x.dtype)。")
_IN_FLOAT32 = ("参与运算的张量 dtype 不一样（比如一个 float32，一个 bfloat16）。这一题的约定是在 float32 里算："
               "先定下工作精度 work = torch.promote_types(x.dtype, torch.float32)（x 是输入；bfloat16 → float32，float64 不变），"
               "把输入都转成 work，中间新建的张量（torch.zeros、torch.eye、mask 的填充值……）也用 dtype=work，"
               "最后再把结果转回输入的 dtype。")


def _dtype_of(type_name: str) -> str:
    """The dtype a tensor type name of PyTorch's messages stands for ("CPUBFloat16Type", "torch.FloatTensor")."""
    for part, dtype in (("BFloat16", "bfloat16"), ("Half", "float16"), ("Double", "float64"), ("Float", "float32")):
        if part in type_name:
            return dtype
    return type_name


def explain(message: str, works_in_float32: bool = False) -> str | None:
    """What the error ``message`` (e.g. "RuntimeError: mat1 and mat2 shapes cannot be multiplied (6x8 and
    16x8)") means for the student's tensors; None when it is not one the course knows. ``works_in_float32``:
    the exercise's contract computes in float32 and casts back (what to do about mixed dtypes differs)."""
    if re.search(_MIXED_DTYPES, message):
        return _IN_FLOAT32 if works_in_float32 else _IN_INPUT_DTYPE
    for pattern, say in _RULES:
        found = re.search(pattern, message)
        if found:
            return say(found)
    return None


def summary(error: BaseException) -> str:
    """The first line of what the student's code raised, as a verdict's summary says it."""
    text = str(error).strip().splitlines()
    return f"运行出错：{type(error).__name__}: {text[0][:300] if text else ''}"
