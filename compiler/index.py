"""Index arithmetic: loop variables, integer division, loop-nest simplification.

Indices are sympy expressions over non-negative integer loop variables. The two
non-affine functions we need are FloorDiv and ModularIndexing (both on
non-negative operands), kept as opaque functions so sympy never turns them into
rationals.
"""
from __future__ import annotations

import functools
from typing import Sequence

import sympy


class FloorDiv(sympy.Function):
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        # (k*b*x + y) // b == k*x + y // b for affine a; a constant c leaves c // b outside
        # too, so that what is left inside is not negative where a is not (printed as
        # C's and Triton's truncating `/`: (37*x + y - 1323) // 37 became x + (y - 1323) // 37)
        if isinstance(a, sympy.Add):
            exact, rest = [], []
            for t in a.args:
                (exact if _divisible(t, b) else rest).append(t)
            const = [t for t in rest if t.is_Integer]
            if b.is_Integer and const and len(rest) > 1 and not 0 <= int(const[0]) < int(b):
                q, r = divmod(int(const[0]), int(b))
                exact.append(sympy.Integer(q * int(b)))
                rest = [t for t in rest if not t.is_Integer] + ([sympy.Integer(r)] if r else [])
            if exact:
                return sympy.Add(*[t / b for t in exact]) + FloorDiv(sympy.Add(*rest), b)
        if _divisible(a, b):
            return a / b
        return None


class ModularIndexing(sympy.Function):
    """(a // div) % mod."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, div, mod):
        if mod == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and div.is_Integer and mod.is_Integer:
            return sympy.Integer((int(a) // int(div)) % int(mod))
        # a constant of a moved into [0, div * mod), which leaves the value as it is: a
        # negative a is printed as C's and Triton's `%`, whose result takes a's sign
        if isinstance(a, sympy.Add) and div.is_Integer and mod.is_Integer:
            span = int(div) * int(mod)
            const = [t for t in a.args if t.is_Integer]
            if const and not 0 <= int(const[0]) < span:
                return ModularIndexing(a - const[0] + int(const[0]) % span, div, mod)
        return None


def _divisible(t, b) -> bool:
    if not b.is_Integer:
        return False
    coeff, _ = t.as_coeff_Mul()
    return coeff.is_Integer and int(coeff) % int(b) == 0


@functools.lru_cache(None)
def symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


def loop_vars(prefix: str, n: int) -> list[sympy.Symbol]:
    return [symbol(f"{prefix}{k}") for k in range(n)]


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def is_dense(size: Sequence[int], stride: Sequence[int]) -> bool:
    """A non-overlapping, dense layout (a permuted contiguous one)."""
    expected = 1
    for st, n in sorted((st, n) for n, st in zip(size, stride) if n != 1):
        if st != expected:
            return False
        expected *= n
    return True


def linear_index(index: Sequence[sympy.Expr], stride: Sequence[int], offset=0) -> sympy.Expr:
    return sympy.Add(sympy.Integer(offset), *[i * s for i, s in zip(index, stride) if s != 0])


def unflatten(flat: sympy.Expr, size: Sequence[int]) -> list[sympy.Expr]:
    """Index into a contiguous array of `size` from its flat position."""
    if _numel(size) == 0:  # no position exists: any index will do
        return [sympy.Integer(0)] * len(size)
    out, div = [], 1
    for s in reversed(size):
        out.append(sympy.Integer(0) if s == 1 else ModularIndexing(flat, div, s) if div * s != _numel(size) else FloorDiv(flat, div))
        div *= s
    return list(reversed(out))


def _numel(size):
    n = 1
    for s in size:
        n *= s
    return n


def sympy_str(e) -> str:
    return str(e)


def is_affine_in(expr: sympy.Expr, var: sympy.Symbol) -> bool:
    """True when `var` appears only linearly, outside FloorDiv/ModularIndexing."""
    for f in expr.atoms(FloorDiv, ModularIndexing, sympy.Min, sympy.Max):
        if var in f.free_symbols:
            return False
    return sympy.diff(expr, var).free_symbols.isdisjoint({var})


def coefficient(expr: sympy.Expr, var: sympy.Symbol) -> sympy.Expr:
    return sympy.expand(expr).coeff(var)


def merge_loops(sizes: list[int], indices: list[sympy.Expr], vars: list[sympy.Symbol]):
    """Simplify a loop nest: drop size-1 loops, merge neighbours that every index
    walks contiguously (coeff(v_j) == size_{j+1} * coeff(v_{j+1})).

    Returns (new_sizes, reindex) where reindex maps the new loop variables
    (same names, fewer of them) to expressions for the old ones.
    """
    # ranges as groups of original dims, outermost first
    groups = [[k] for k, s in enumerate(sizes) if s != 1]
    exprs = [sympy.expand(e) for e in indices]

    def mergeable(a: int, b: int) -> bool:  # a directly outside b
        for e in exprs:
            if not (is_affine_in(e, vars[a]) and is_affine_in(e, vars[b])):
                return False
            if sympy.simplify(e.coeff(vars[a]) - sizes[b] * e.coeff(vars[b])) != 0:
                return False
        return True

    k = len(groups) - 1
    while k > 0:
        if mergeable(groups[k - 1][-1], groups[k][0]):
            groups[k - 1] = groups[k - 1] + groups[k]
            del groups[k]
        k -= 1
    # Within a merged group every index satisfies c_a == size_b * c_b, so
    # c_a*v_a + c_b*v_b == c_b*(size_b*v_a + v_b): the innermost variable, now
    # running over the whole group, carries the group and the rest are zero.
    new_sizes = [_numel([sizes[d] for d in g]) for g in groups]
    new_vars = vars[: len(groups)]
    old_of = {v: sympy.Integer(0) for v in vars}
    for g, nv in zip(groups, new_vars):
        old_of[vars[g[-1]]] = nv
    return new_sizes, old_of


class IndexMax(sympy.Max):
    """Max of index expressions without sympy's comparisons of its arguments
    (factor_terms of their differences), which it makes whenever one is built,
    each substitution included: they were most of lowering a padded pooling
    window. Numbers fold, and so does a bound that always_holds without the
    loop's ranges (0 or less under a nonnegative expression); unclamp strips the
    rest by the ranges."""

    def __new__(cls, *args, **assumptions):
        args = [sympy.sympify(a) for a in args]
        if all(a.is_number for a in args):
            return sympy.Max(*args)
        if len(args) == 2:
            e, c = sorted(args, key=lambda a: a.is_number)
            if c.is_number and always_holds(e, ">=", c, {}):
                return e
        return sympy.Max.__new__(cls, *args, evaluate=False)


class IndexMin(sympy.Min):
    """Min of index expressions, as IndexMax: numbers fold, the rest is built as is."""

    def __new__(cls, *args, **assumptions):
        args = [sympy.sympify(a) for a in args]
        if all(a.is_number for a in args):
            return sympy.Min(*args)
        return sympy.Min.__new__(cls, *args, evaluate=False)


def clamp(e: sympy.Expr, lo: int | None, hi: int | None) -> sympy.Expr:
    """max(e, lo) then min(.., hi) (None: no such side), as IndexMax and IndexMin."""
    e = e if lo is None else IndexMax(e, lo)
    return e if hi is None else IndexMin(e, hi)


def substitute(expr: sympy.Expr, mapping: dict) -> sympy.Expr:
    return sympy.sympify(expr).xreplace(mapping) if mapping else expr


def upper_bound(expr: sympy.Expr, ranges: dict) -> int | None:
    """Largest value of an index expression over loop variables 0 <= v < ranges[v]."""
    expr = sympy.expand(expr)
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return ranges[expr] - 1 if expr in ranges else None
    if isinstance(expr, sympy.Add):
        parts = [upper_bound(t, ranges) for t in expr.args]
        return None if None in parts else sum(parts)
    if isinstance(expr, sympy.Mul):
        c, rest = expr.as_coeff_Mul()
        if c.is_Integer and c >= 0:
            b = upper_bound(rest, ranges)
            return None if b is None else int(c) * b
        return None
    if isinstance(expr, FloorDiv):
        b = upper_bound(expr.args[0], ranges)
        return None if b is None else b // int(expr.args[1])
    if isinstance(expr, ModularIndexing):
        return int(expr.args[2]) - 1
    return None


def unclamp(idx: sympy.Expr, ranges: dict) -> tuple[sympy.Expr, list]:
    """A load at a clamped index as a masked load at the index itself: (index,
    [(u, op, bound)]: the conditions u op bound that mask it, constants on the
    bound's side: (x0 % 128) >= 64, which Triton sees constant over 64 elements,
    not (x0 % 128) - 64 >= 0). The lowerings clamp
    only where they discard the value outside the clamp (cat, constant_pad_nd, a
    short scatter index), so a masked load's 0 there serves as well. Unclamped,
    Triton sees the accesses contiguous and loads them in vectors: minimum(63,
    x % 128) is contiguous to no analysis (H200, a rotary embedding's cat of
    halves, bf16 [8, 32, 2048, 128]: 81.1 us clamped against 64.7 for Inductor)."""
    if not idx.has(sympy.Min, sympy.Max):
        return idx, []
    bounds = []

    def strip(e):
        if isinstance(e, (sympy.Min, sympy.Max)) and len(e.args) == 2:
            c, u = sorted(e.args, key=lambda a: not a.is_Integer)
            if c.is_Integer and not u.is_Integer:
                u, c = strip(u), int(c)
                op = "<=" if isinstance(e, sympy.Min) else ">="
                if not always_holds(u, op, c, ranges):
                    bounds.append(as_bound(u, op, c))
                return u
        return e.func(*[strip(a) for a in e.args]) if e.args else e

    return strip(idx), bounds


def always_holds(u: sympy.Expr, op: str, c: int, ranges: dict) -> bool:
    """Whether u <= c (op "<=") or u >= c (">=") holds over the loop variables'
    `ranges`, as far as upper_bound and sympy's signs tell."""
    if op == "<=":
        top = upper_bound(u, ranges)
        return top is not None and top <= c
    return c <= 0 and bool(u.is_nonnegative)


def as_bound(u: sympy.Expr, op: str, c: int) -> tuple:
    """u <= c or u >= c as an unclamped load's mask term (rest, "<" or ">=", bound),
    u's constant moved to the bound's side."""
    k, rest = u.as_coeff_Add()
    return (rest, "<", c + 1 - int(k)) if op == "<=" else (rest, ">=", c - int(k))


def simplify_with_ranges(expr: sympy.Expr, ranges: dict) -> sympy.Expr:
    """Remove FloorDiv/ModularIndexing that the variables' ranges make trivial:
    (k*d*m*v + w) // d % m == w // d when 0 <= w < d*m, and so on."""

    def fdiv(a, d):
        a, d = sympy.expand(a), int(d)
        keep, drop = _split_multiples(a, d)
        b = upper_bound(keep, ranges)
        if b is not None and 0 <= b < d:
            return sympy.Add(*[t / d for t in drop]) if drop else sympy.Integer(0)
        above = _above(a, d, ranges)
        return fdiv(*above) if above else FloorDiv(a, d)

    def mod(a, div, m):
        a, div, m = sympy.expand(a), int(div), int(m)
        keep, _ = _split_multiples(a, div * m)
        b = upper_bound(keep, ranges)
        if b is not None and 0 <= b < div * m:
            return fdiv(keep, div)
        above = _above(keep, div, ranges)
        if above:
            return mod(*above, m)
        return ModularIndexing(sympy.Add(*keep.args) if isinstance(keep, sympy.Add) else keep, div, m)

    expr = sympy.expand(expr)
    for _ in range(3):
        new = expr.replace(lambda e: isinstance(e, FloorDiv), lambda e: fdiv(*e.args))
        new = new.replace(lambda e: isinstance(e, ModularIndexing), lambda e: mod(*e.args))
        new = sympy.expand(new)
        if new == expr:
            break
        expr = new
    return expr


def fold_divmod(expr: sympy.Expr) -> sympy.Expr:
    """Undo an unflatten, so a loop split into (outer, inner) and read back flat
    compares equal:  c*m*(a // (d*m)) + c*((a // d) % m) == c*(a // d)
    and              c*m*((a // (d*m)) % n) + c*((a // d) % m) == c*((a // d) % (m*n))."""
    expr = sympy.expand(expr)
    changed = True
    while changed and isinstance(expr, sympy.Add):
        changed = False
        terms = {}
        for t in expr.args:
            c, f = t.as_coeff_Mul()
            terms[f] = terms.get(f, 0) + c
        for f, c in terms.items():
            if not isinstance(f, ModularIndexing):
                continue
            a, div, mod = f.args
            outer = FloorDiv(a, div * mod)
            if isinstance(outer, FloorDiv) and terms.get(outer) == c * mod:
                expr = sympy.expand(expr - c * f - c * mod * outer + c * FloorDiv(a, div))
                changed = True
                break
            upper = next((g for g in terms if isinstance(g, ModularIndexing) and g.args[0] == a
                          and g.args[1] == div * mod and terms[g] == c * mod), None)
            if upper is not None:
                expr = sympy.expand(expr - c * f - c * mod * upper + c * ModularIndexing(a, div, mod * upper.args[2]))
                changed = True
                break
    return expr


def simplify(expr, ranges: dict) -> sympy.Expr:
    """Range-aware simplification to a fixed point (cached: kernels repeat indices)."""
    key = tuple(sorted(((v.name, int(n)) for v, n in ranges.items()), key=lambda kv: kv[0]))
    return _simplify(sympy.sympify(expr), key)


@functools.lru_cache(8192)
def _simplify(expr, key) -> sympy.Expr:
    if not expr.has(FloorDiv, ModularIndexing):
        return expr
    ranges = {symbol(name): n for name, n in key}
    for _ in range(4):
        new = fold_divmod(simplify_with_ranges(expr, ranges))
        if new == expr:
            break
        expr = new
    return expr


def _above(a: sympy.Expr, d: int, ranges: dict) -> tuple | None:
    """(u, d / q) where a = q * u + w, q divides d and 0 <= w < q over the ranges, so
    that a // d == u // (d / q): a 2-D tile's 35 * y0 + x0 (x0 < 35) over 1120 is
    y0 // 32. None where no such q is."""
    terms = sympy.Add.make_args(a)
    for q in sorted({int(abs(t.as_coeff_Mul()[0])) for t in terms}, reverse=True):
        if q < 2 or d % q:
            continue
        high = [t for t in terms if _divisible(t, sympy.Integer(q))]
        low = [t for t in terms if not _divisible(t, sympy.Integer(q))]
        b = upper_bound(sympy.Add(*low), ranges)
        if high and low and b is not None and b < q and not any(t.is_Integer and t < 0 for t in low):
            return sympy.Add(*[t / q for t in high]), d // q
    return None


def _split_multiples(a: sympy.Expr, d: int):
    """Split a sum into (the rest, the terms that are multiples of d)."""
    terms = a.args if isinstance(a, sympy.Add) else (a,)
    multiples = [t for t in terms if _divisible(t, sympy.Integer(d))]
    rest = [t for t in terms if not _divisible(t, sympy.Integer(d))]
    return sympy.Add(*rest), multiples
