. .gpu/env.sh
timeout 120 python3 .gpu/hang.py > $OUT/hang.txt 2>&1; grep -v Warning $OUT/hang.txt | tail -c 9000
