"""A site's accounting history (``sacct``) and what is learned from it.

``records`` holds the job values and the history CSV, ``sacct`` reads sacct's JSON and
text, ``fetch`` calls sacct a time slice at a time, ``trace`` turns a history into the
simulator's trace format.
"""
