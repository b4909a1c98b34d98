"""Install the mdr package with libmdr bundled in it:

    pip install --no-build-isolation ./python

builds libmdr with CMake (the CUDA backend when nvcc is found) into
<repo>/build-python and copies it to mdr/_lib/. MDR_LIBRARY=/path/libmdr.so
bundles that file instead of building; MDR_CMAKE_ARGS adds CMake options
(e.g. "-DMDR_ENABLE_CUDA=OFF"). The package itself is pure Python."""
import os
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _library():
    env = os.environ.get("MDR_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise SystemExit("MDR_LIBRARY=%s: no such file" % env)
        return env
    if not os.path.isfile(os.path.join(REPO, "CMakeLists.txt")):
        raise SystemExit("not in the mdr repository: set MDR_LIBRARY to a built libmdr.so")
    build = os.path.join(REPO, "build-python")
    jobs = os.environ.get("MDR_BUILD_JOBS", str(min(os.cpu_count() or 2, 8)))
    args = ["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DMDR_BUILD_TESTS=OFF", "-DMDR_BUILD_BENCH=OFF", "-DMDR_BUILD_EXAMPLES=OFF",
            "-DMDR_BUILD_DEV=OFF"] + shlex.split(os.environ.get("MDR_CMAKE_ARGS", ""))
    subprocess.check_call(args)
    subprocess.check_call(["cmake", "--build", build, "--target", "mdr", "-j", jobs])
    path = os.path.join(build, "libmdr.so")
    if not os.path.exists(path):
        raise SystemExit("the build made no %s" % path)
    return os.path.realpath(path)


class build_py_with_lib(build_py):
    def run(self):
        super().run()
        src = _library()
        dest = os.path.join(self.build_lib, "mdr", "_lib")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(src, os.path.join(dest, "libmdr.so"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it carries libmdr.so
        return True


setup(cmdclass={"build_py": build_py_with_lib}, distclass=BinaryDistribution)
