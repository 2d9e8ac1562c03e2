package steps

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/assets"
)

var corev1Namespace = corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
	Name:   StateNamespace,
	Labels: map[string]string{assets.ManagedByLabel: assets.ManagedByValue},
}}
