{{/* Checks JSON schema cannot express; each fails the render with the value and the fix. */}}
{{- define "ej.validate" -}}
{{- $v := .Values -}}
{{- if gt (int $v.minNodes) (int $v.maxNodes) -}}
{{- fail (printf "minNodes=%d is invalid: expected <= maxNodes (%d)" (int $v.minNodes) (int $v.maxNodes)) -}}
{{- end -}}
{{- if not (kindIs "invalid" $v.replicas) -}}
{{- if or (lt (int $v.replicas) (int $v.minNodes)) (gt (int $v.replicas) (int $v.maxNodes)) -}}
{{- fail (printf "replicas=%d is invalid: expected between minNodes (%d) and maxNodes (%d)" (int $v.replicas) (int $v.minNodes) (int $v.maxNodes)) -}}
{{- end -}}
{{- end -}}
{{- $burst := ($v.burst | default dict) -}}
{{- $burstNodes := int ($burst.nodes | default 0) -}}
{{- if gt $burstNodes 0 -}}
{{- if lt (sub (int $v.maxNodes) $burstNodes) (int $v.minNodes) -}}
{{- fail (printf "burst.nodes=%d is invalid: expected <= maxNodes - minNodes (%d): the core, maxNodes - burst.nodes, holds at least minNodes" $burstNodes (sub (int $v.maxNodes) (int $v.minNodes))) -}}
{{- end -}}
{{- if not (kindIs "invalid" $v.replicas) -}}
{{- if gt (int $v.replicas) (sub (int $v.maxNodes) $burstNodes) -}}
{{- fail (printf "replicas=%d is invalid: expected <= maxNodes - burst.nodes (%d): with a burst, replicas sizes the core" (int $v.replicas) (sub (int $v.maxNodes) $burstNodes)) -}}
{{- end -}}
{{- end -}}
{{- if or (not $burst.priorityClassName) (eq $burst.priorityClassName $v.priorityClassName) -}}
{{- fail (printf "burst.priorityClassName=%q is invalid: expected a class of its own, below priorityClassName=%q (the borrowed workers go first)" ($burst.priorityClassName | default "") $v.priorityClassName) -}}
{{- end -}}
{{- if $v.metrics -}}
{{- fail "metrics is invalid with burst.nodes > 0: expected no HPA (it would scale the core's replicas past the core)" -}}
{{- end -}}
{{- end -}}
{{- $host := include "ej.rdzvHost" . -}}
{{- if regexMatch (printf "^%s-(worker|master)-[0-9]+([.]|$)" $v.name) $host -}}
{{- fail (printf "rdzv.host=%q is invalid: expected the rendezvous Service, never a worker pod (evicting it would end the job)" $host) -}}
{{- end -}}
{{- if and (not $v.checkpoint.claimName) (hasPrefix "/" $v.checkpoint.dir) -}}
{{- fail (printf "checkpoint.claimName=\"\" is invalid: expected the claim to mount at checkpoint.dir=%q (only an object-store URL, s3:// or az://, needs none)" $v.checkpoint.dir) -}}
{{- end -}}
{{- if and $v.checkpoint.claimName (not (hasPrefix "/" $v.checkpoint.dir)) -}}
{{- fail (printf "checkpoint.dir=%q is invalid: expected the absolute path to mount checkpoint.claimName=%q at (an object-store URL takes claimName \"\")" $v.checkpoint.dir $v.checkpoint.claimName) -}}
{{- end -}}
{{- if and (gt (int $v.gpusPerNode) 0) (gt (int $v.nprocPerNode) (int $v.gpusPerNode)) -}}
{{- fail (printf "nprocPerNode=%d is invalid: expected <= gpusPerNode (%d), one GPU per worker process" (int $v.nprocPerNode) (int $v.gpusPerNode)) -}}
{{- end -}}
{{- $portEnv := list -}}
{{- if eq $v.faultTolerance "per-step" -}}{{- range $v.groupPorts -}}{{- $portEnv = append $portEnv .env -}}{{- end -}}{{- end -}}
{{- range $key, $_ := $v.env -}}
{{- if or (hasKey $v.jobEnv $key) (hasPrefix "PET_" $key) (has $key $portEnv) -}}
{{- fail (printf "env.%s is invalid: expected a variable the chart does not set itself (PET_* come from elasticPolicy, jobEnv from the JobSpec)" $key) -}}
{{- end -}}
{{- end -}}
{{- if eq $v.faultTolerance "per-step" -}}
{{- if not (has "--standalone" ($v.torchrunArgs | default list)) -}}
{{- fail (printf "torchrunArgs=%v is invalid: expected --standalone with faultTolerance per-step (each pod is a replica group of its own; without it torchrun would wait for the operator's PET_NNODES pods)" $v.torchrunArgs) -}}
{{- end -}}
{{- $bind := printf "--bind=[::]:%d" (int $v.lighthouse.port) -}}
{{- $bindOk := false -}}
{{- range $v.lighthouse.args -}}{{- if and (hasPrefix "--bind=" .) (hasSuffix (printf ":%d" (int $v.lighthouse.port)) .) -}}{{- $bindOk = true -}}{{- end -}}{{- end -}}
{{- if not $bindOk -}}
{{- fail (printf "lighthouse.args=%v is invalid: expected a --bind=HOST:%d flag (the lighthouse.port its Service sends to), e.g. %s" $v.lighthouse.args (int $v.lighthouse.port) $bind) -}}
{{- end -}}
{{- $min := printf "--min_replicas=%d" (int $v.minNodes) -}}
{{- if not (has $min $v.lighthouse.args) -}}
{{- fail (printf "lighthouse.args=%v is invalid: expected %s, the quorum's minimum is minNodes" $v.lighthouse.args $min) -}}
{{- end -}}
{{- end -}}
{{- range $v.rdzv.conf -}}
{{- if and (eq .key "is_host") (eq $v.rdzv.backend "c10d") (ne .value "false") -}}
{{- fail (printf "rdzv.conf is_host=%q is invalid: expected \"false\" with c10d (the store runs in its own pod, never on a worker)" .value) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The PyTorchJob of a job's borrowed part (lab.vocab.job.burst_job_name). */}}
{{- define "ej.burstName" -}}
{{ .Values.name }}-burst
{{- end -}}

{{- define "ej.storeName" -}}
{{ .Values.name }}-rdzv-store
{{- end -}}

{{/* The per-step job's lighthouse (lab.vocab.platform_facts.lighthouse_name). */}}
{{- define "ej.lighthouseName" -}}
{{ .Values.name }}-lighthouse
{{- end -}}

{{- define "ej.lighthouseHost" -}}
{{ include "ej.lighthouseName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{/* Rendezvous host: the value given, else the etcd Service (in its namespace: a team's job reaches
    the platform's) or this job's c10d store. */}}
{{- define "ej.rdzvHost" -}}
{{- if .Values.rdzv.host -}}
{{ .Values.rdzv.host }}
{{- else if eq .Values.rdzv.backend "c10d" -}}
{{ include "ej.storeName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- else -}}
{{ .Values.rdzv.etcdService }}.{{ .Values.rdzv.etcdNamespace | default .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}
{{- end -}}

{{- define "ej.rdzvPort" -}}
{{- if not (kindIs "invalid" .Values.rdzv.port) -}}
{{ int .Values.rdzv.port }}
{{- else if eq .Values.rdzv.backend "c10d" -}}
{{ int .Values.c10dStore.port }}
{{- else -}}
2379
{{- end -}}
{{- end -}}

{{/* rdzvConf in order; c10d gets is_host=false unless the values already say so. */}}
{{- define "ej.rdzvConf" -}}
{{- $conf := .Values.rdzv.conf -}}
{{- $hasHost := false -}}
{{- range $conf -}}{{- if eq .key "is_host" -}}{{- $hasHost = true -}}{{- end -}}{{- end -}}
{{- range $conf }}
- key: {{ .key | quote }}
  value: {{ .value | quote }}
{{- end -}}
{{- if and (eq .Values.rdzv.backend "c10d") (not $hasHost) }}
- key: "is_host"
  value: "false"
{{- end -}}
{{- end -}}

{{- define "ej.labels" -}}
app.kubernetes.io/name: elastic-pytorchjob
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/part-of: elastic-spot-lab
elastic-spot-lab/job: {{ .Values.name | quote }}
{{- end -}}
