"""The lab notebooks' Python side (notebooks/Step0..Step5).

shared.py    what every notebook uses: the target, a run's work directory, `elastic-lab` run
             as a user types it, the check that nothing is left running, the plots
outputs.py   `make notebooks`: run the six notebooks on the local target and store their outputs
"""
