"""Holds torch_inputs.py's report to the program: the tensor sites of its
marked lines are inputs, every byte of them (each iteration's block).

    python3 inputs_check.py ANALYSIS.json TRUTH.json"""
import json
import sys


def main(analysis_path, truth_path):
    analysis = json.load(open(analysis_path))
    truth = json.load(open(truth_path))
    failed = False
    for name, line in truth["lines"].items():
        at = f"torch_inputs.py:{line}"
        sites = [s for s in analysis["tensor_sites"]
                 if at in s["label"] and not s["label"].split(at, 1)[1][:1].isdigit()]
        total = sum(s["total_bytes"] for s in sites)
        inputs = sum(s.get("roles", {}).get("inputs", 0) for s in sites)
        block = -(-truth["bytes"][name] // 512) * 512
        want = block * truth["iterations"]
        ok = bool(sites) and inputs == total == want
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name} (line {line}): inputs {inputs} of {total} bytes, "
              f"{truth['iterations']} blocks of {block} = {want}; roles {[s.get('roles') for s in sites]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
