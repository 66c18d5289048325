for m in LAZY EAGER; do CUDA_MODULE_LOADING=$m python3 .diag/prof_cost.py 2>&1 | grep -v -i warn | head -3 | sed "s/^/$m: /"; done
