#!/usr/bin/env python3
"""sass.py — the SASS of the fused zeroing kernels, as the H200 runs them,
for a stage_lab variant or a source tree, read without a GPU.

What a change to the stage block does to the order of its loads, waits and
stores is decided by ptxas, not by the source's order: a test placed after
a load in C++ may still be issued before it (dev/step_params_route.md, "The
stage block's SASS"). This builds kernels/zero_fused.cu of the tree for
sm_90 (a cubin, the library's defines), disassembles it and prints one
kernel: whole, or only the lines that make a warp wait or leave the SM
(`--chain`: constant and memory loads, stores, shuffles, votes, barriers,
branches and their labels), which is how a stage block's path to its first
store reads.

  dev/sass.py [--variant NAME | --tree DIR] [--kernel TEXT] [--chain]
              [--block0] [--out FILE]
  dev/sass.py --list [--variant NAME | --tree DIR]
  dev/sass.py --self-test

--variant NAME: this tree with stage_lab.py's patches of that name (base:
none). --tree DIR: another source tree as it is (a branch archived with
`git archive BRANCH | tar -x -C DIR`). --kernel TEXT: the first kernel
whose mangled name holds TEXT (default: the large image class's list-form
inline kernel, zero_list_inline_kernel<1152>). --block0: from the kernel's
first label on, where the inline kernels' stage block (block 0) starts.
--list: the kernels' mangled names.

nvdisasm comes from $NVDISASM or PATH. The CUDA 13 toolkit does not always
ship it (CI's does not). An older one (Debian's non-free
nvidia-cuda-toolkit 11.8 package has one: `apt-get download
nvidia-cuda-toolkit`, then `dpkg -x` it, no install needed) reads sm_90
code but not CUDA 13's ELF header, and says the file "does not contain Cuda
architecture information"; this then writes a copy with the header in the
older form (OS ABI, ABI version and the flags' architecture fields) and
reads that. Only the header changes: the code is the same bytes."""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ARCH = 90
DIRS = ("include", "src", "kernels", "staging", "plan", "graphs", "tests")
DEFINES = ["-DNDEBUG", "-DMDR_BUILDING_LIBRARY=1", "-DMDR_HAVE_CUDA=1"]
DEFAULT_KERNEL = "zero_list_inline_kernelILj1152E"

# The ELF header fields CUDA 13 wrote differently: e_ident's OS ABI (byte 7)
# and ABI version (byte 8), and e_flags (offset 48 in ELF64), whose older
# form is the SM in bits 0-7, the virtual SM in bits 16-23, and the unified
# texture mode and 64-bit address bits (0x500).
OLD_OSABI, OLD_ABIVERSION = 0x33, 7
OLD_FLAG_BITS = 0x500


def old_header(data, arch=ARCH):
    """The cubin `data` with its ELF header in the pre-CUDA-13 form for sm
    `arch` (bytes in, bytes out); anything that is not an ELF64 file is
    refused."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not an ELF64 file")
    out = bytearray(data)
    out[7], out[8] = OLD_OSABI, OLD_ABIVERSION
    struct.pack_into("<I", out, 48, arch | OLD_FLAG_BITS | arch << 16)
    return bytes(out)


# --chain: what makes a warp wait or leaves the SM, and where control goes
CHAIN = re.compile(r"\b(LDC|ULDC|LDG|LD|LDS|STG|ST|STS|SHFL|VOTE|BAR|BRA|EXIT|CALL|RET|ATOM|ATOMG|RED|MEMBAR)\b[.\w]*")


def kernels(sass):
    """The kernels' mangled names, in the order of the disassembly."""
    return re.findall(r"^\.text\.(\S+):", sass, re.M)


def kernel_text(sass, want):
    """The lines of the first kernel whose name holds `want` (None if none)."""
    lines = sass.splitlines()
    start = None
    for i, line in enumerate(lines):
        m = re.match(r"^\.text\.(\S+):", line)
        if m and start is not None:
            return lines[start:i]
        if m and start is None and want in m.group(1):
            start = i
    return lines[start:] if start is not None else None


def block0(lines):
    """From the target of the kernel's first branch on: the inline kernels
    test blockIdx.x first and branch to block 0's code (the stage block),
    the zeroing blocks' falling through."""
    for line in lines:
        m = re.search(r"\bBRA\s+`\((\.L_x_\d+)\)", line)
        if m:
            for i, other in enumerate(lines):
                if other == m.group(1) + ":":
                    return lines[i:]
            break
    return lines


INSN = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?(\S+)\s*(.*?)\s*;")
LOADS = re.compile(r"(LDC|ULDC|LDG|LD|LDS|SHFL|S2R|S2UR)\b")
REG = re.compile(r"\b(U?R)(\d+)(\.64)?\b")


def regs_of(text, width=1):
    """The registers an operand text names: a .64 address, or a load of
    `width` registers, names the ones after it too (RZ/URZ are none)."""
    out = set()
    for kind, n, wide in REG.findall(text):
        w = 2 if wide else width
        out.update(f"{kind}{int(n) + k}" for k in range(w))
    return out


def chain(lines):
    """Labels, the instructions CHAIN names (predicated ones too), and each
    instruction that first reads a register a load has yet to deliver,
    marked with that load: where the warp stalls for it, in program order
    (branches are not followed: code a branch skips still counts, so read
    a mark against the branch before it)."""
    keep, pending = [], {}
    for line in lines:
        if re.match(r"^\.L_x_\d+:", line):
            keep.append(line)
            continue
        m = INSN.match(line)
        if not m:
            continue
        addr, op, ops = m.group(1), m.group(3), m.group(4)
        parts = [x.strip() for x in ops.split(",")] if ops else []
        writes_first = not re.match(r"(ST|RED|BRA|EXIT|BAR|CALL|RET|MEMBAR)", op) and parts
        srcs = regs_of(", ".join(parts[1:] if writes_first else parts))
        if m.group(2):
            srcs |= regs_of(m.group(2))
        waited = sorted({pending[r] for r in srcs if r in pending})
        for w in waited:
            for r in [r for r, v in pending.items() if v == w]:
                del pending[r]
        note = "  // waits for " + ", ".join(w[1] for w in waited) if waited else ""
        if CHAIN.fullmatch(op) or waited:
            keep.append(line + note)
        if writes_first:
            dest = regs_of(parts[0], 4 if ".128" in op else 2 if ".64" in op else 1)
            for r in dest:
                pending.pop(r, None)
            if LOADS.match(op):
                for r in dest:
                    pending[r] = (addr, f"{op} {parts[0]} /*{addr}*/")
    return keep


def disassemble(cubin, nvdisasm):
    """nvdisasm's text of `cubin`, through a copy with the older header when
    this nvdisasm cannot read CUDA 13's."""
    r = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True)
    if r.returncode == 0:
        return r.stdout
    if "architecture information" not in r.stderr:
        raise RuntimeError(f"{nvdisasm}: {r.stderr.strip()}")
    old = cubin + ".oldheader"
    with open(cubin, "rb") as f, open(old, "wb") as g:
        g.write(old_header(f.read()))
    r = subprocess.run([nvdisasm, "-c", old], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{nvdisasm} (older header): {r.stderr.strip()}")
    return r.stdout


def build_cubin(src, tmp):
    """kernels/zero_fused.cu of the tree `src` as an sm_90 cubin in tmp."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cubin = os.path.join(tmp, "zero_fused.cubin")
    inc = [f"-I{os.path.join(src, d)}" for d in ("include", "src", "kernels", "staging", "plan")]
    subprocess.run([nvcc, "-O3", *DEFINES, "-cubin", f"-arch=sm_{ARCH}", *inc,
                    os.path.join(src, "kernels", "zero_fused.cu"), "-o", cubin], check=True)
    return cubin


def tree_of(variant, tree, tmp):
    """The source tree to build: `tree` as it is, or a copy of this one with
    stage_lab's patches for `variant`."""
    if tree:
        return tree
    src = os.path.join(tmp, "src")
    for d in DIRS:
        shutil.copytree(os.path.join(ROOT, d), os.path.join(src, d))
    if variant and variant != "base":
        import stage_lab
        if variant not in stage_lab.VARIANTS:
            sys.exit(f"sass: no stage_lab variant {variant!r}")
        if not stage_lab.apply_patches(variant, src):
            sys.exit(f"sass: {variant}'s patches do not apply")
    return src


def self_test():
    """The header rewrite and the kernel and chain filters on made-up
    input: exit 1 on a mismatch."""
    hdr = bytearray(64)
    hdr[:5] = b"\x7fELF\x02"
    hdr[7], hdr[8] = 0x41, 8
    struct.pack_into("<I", hdr, 48, 0x6005A04)
    got = old_header(bytes(hdr) + b"code")
    ok = got[7] == 0x33 and got[8] == 7 and struct.unpack_from("<I", got, 48)[0] == 0x5A055A
    ok = ok and got[64:] == b"code" and got[:7] == bytes(hdr[:7])
    try:
        old_header(b"\x7fELF\x01" + bytes(59))
        ok = False
    except ValueError:
        pass
    sass = ("\t.headerflags\n"
            ".text._Z1aPi:\n        /*0000*/                   LDC R1, c[0x0][0x28] ;\n"
            "        /*0010*/                   EXIT ;\n"
            ".text._Z23zero_list_inline_kernelILj1152EEv:\n"
            "        /*0000*/                   S2R R0, SR_CTAID.X ;\n"
            "        /*0010*/              @!P0 BRA `(.L_x_1) ;\n"
            "        /*0020*/                   STG.E.128 [R2.64], RZ ;\n"
            ".L_x_1:\n"
            "        /*0030*/                   LDC R8, c[0x0][0x138c] ;\n"
            "        /*0040*/                   IMAD.U32 R16, RZ, RZ, UR4 ;\n"
            "        /*0050*/              @!P3 LD.E.128 R24, [R18.64] ;\n"
            "        /*0060*/                   SHFL.IDX PT, R48, R31, R16, 0x1f ;\n"
            "        /*0070*/                   LOP3.LUT P0, RZ, R8, 0x3, RZ, 0xc0, !PT ;\n"
            "        /*0080*/                   EXIT ;\n")
    ok = ok and kernels(sass) == ["_Z1aPi", "_Z23zero_list_inline_kernelILj1152EEv"]
    k = kernel_text(sass, DEFAULT_KERNEL)
    ok = ok and k is not None and k[0].startswith(".text._Z23") and len(k) == 11
    ok = ok and kernel_text(sass, "nosuch") is None
    b = block0(k)
    ok = ok and b[0] == ".L_x_1:" and len(b) == 7
    ops = [line if line.startswith(".L") else re.sub(r"^\s*/\*\w+\*/\s+(@!?P\d\s+)?", "", line).split()[0]
           for line in chain(b)]
    ok = ok and ops == [".L_x_1:", "LDC", "LD.E.128", "SHFL.IDX", "LOP3.LUT", "EXIT"]
    # the flags' test waits for their load; the shuffle's R16 came from a
    # register move, not a load, so nothing else is marked
    marks = [line.split("// waits for ")[1] for line in chain(b) if "// waits for " in line]
    ok = ok and marks == ["LDC R8 /*0030*/"]
    # a .64 address names two registers, a .128 load four; a wait clears
    # every register of its load
    ok = ok and regs_of("[R18.64]") == {"R18", "R19"} and regs_of("R24", 4) == {"R24", "R25", "R26", "R27"}
    two = ["        /*0000*/                   LDG.E.128 R4, [R2.64] ;",
           "        /*0010*/                   IADD3 R9, R7, 0x1, RZ ;",
           "        /*0020*/                   IADD3 R10, R5, 0x1, RZ ;",
           "        /*0030*/                   STG.E [R2.64], R9 ;"]
    marks = [line.split("// waits for ")[1] for line in chain(two) if "// waits for " in line]
    ok = ok and marks == ["LDG.E.128 R4 /*0000*/"]
    print("sass: self-test " + ("passes" if ok else "FAILS"))
    return 0 if ok else 1


def main(argv):
    if "--self-test" in argv:
        return self_test()
    opts, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if a in ("--variant", "--tree", "--kernel", "--out"):
            if i + 1 >= len(argv):
                sys.exit(f"sass: {a} wants a value")
            opts[a], i = argv[i + 1], i + 2
        elif a in ("--chain", "--block0", "--list"):
            opts[a], i = True, i + 1
        else:
            sys.exit(f"sass: unknown argument {a!r} (see the head of dev/sass.py)")
    if "--variant" in opts and "--tree" in opts:
        sys.exit("sass: --variant or --tree, not both")
    nvdisasm = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvdisasm:
        sys.exit("sass: no nvdisasm (set NVDISASM; the head of dev/sass.py says where one comes from)")
    if not (os.path.isfile(nvdisasm) and os.access(nvdisasm, os.X_OK)):
        sys.exit(f"sass: {nvdisasm} is not an executable file")
    if "--tree" in opts and not os.path.isfile(os.path.join(opts["--tree"], "kernels", "zero_fused.cu")):
        sys.exit(f"sass: {opts['--tree']} has no kernels/zero_fused.cu")
    with tempfile.TemporaryDirectory() as tmp:
        src = tree_of(opts.get("--variant"), opts.get("--tree"), tmp)
        try:
            sass = disassemble(build_cubin(src, tmp), nvdisasm)
        except subprocess.CalledProcessError:
            sys.exit("sass: nvcc failed on the tree's kernels/zero_fused.cu (its messages above)")
        except RuntimeError as e:
            sys.exit(f"sass: {e}")
    if not kernels(sass):
        sys.exit(f"sass: {nvdisasm} printed no kernel")
    if "--list" in opts:
        print("\n".join(kernels(sass)))
        return 0
    lines = kernel_text(sass, opts.get("--kernel", DEFAULT_KERNEL))
    if lines is None:
        sys.exit(f"sass: no kernel holds {opts.get('--kernel', DEFAULT_KERNEL)!r} (--list names them)")
    if "--block0" in opts:
        lines = block0(lines)
    if "--chain" in opts:
        lines = chain(lines)
    text = "\n".join(lines) + "\n"
    if "--out" in opts:
        with open(opts["--out"], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
